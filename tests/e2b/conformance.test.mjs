// E2B's own SDK (the npm package `e2b`, pinned in package.json) against cordond's E2B surface.
// Run by tests/e2b/test_e2b.py, which starts cordond and sets E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY and CORDON_E2B_KEY2 (a second key, for the isolation checks). Written from E2B's
// public docs and protocol definitions: what the SDK does is the specification.
import { test, after } from 'node:test'
import http from 'node:http'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError, NotFoundError, SandboxError, FilesystemEventType } from 'e2b'

const API = process.env.E2B_API_URL
const KEY2 = process.env.CORDON_E2B_KEY2
const RUN = `run-${process.pid}-${Date.now()}`
const made = []

async function create(opts = {}) {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, ...opts, metadata: { suite: RUN, ...(opts.metadata ?? {}) } })
  made.push(sbx)
  return sbx
}

after(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => {})))
})

// One sandbox for the commands and files tests.
let shared
async function box() {
  shared ??= await create({ envs: { SANDBOX_VAR: 'from-create' } })
  return shared
}

// ---- lifecycle ----

test('create, info, kill, and a killed sandbox is gone', async () => {
  const sbx = await create({ metadata: { role: 'lifecycle' } })
  assert.match(sbx.sandboxId, /^[a-z0-9]+$/)
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.state, 'running')
  assert.equal(info.metadata.role, 'lifecycle')
  assert.equal(info.metadata['e2b.secure'], undefined, 'the reserved key is not shown')
  assert.ok(info.endAt > info.startedAt)
  assert.equal(await sbx.isRunning(), true)
  assert.equal(await sbx.kill(), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'a second kill finds nothing')
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), NotFoundError)
  assert.equal(await sbx.isRunning(), false)
  await assert.rejects(sbx.commands.run('true'))
  // envd of a dead sandbox answers 502, as E2B's proxy does
  const r = await fetch(`${process.env.E2B_SANDBOX_URL}/health`, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId } })
  assert.equal(r.status, 502)
})

test('a stream open when its sandbox is killed ends with an error', async () => {
  const sbx = await create()
  const h = await sbx.commands.run('sleep 60', { background: true })
  await sbx.kill()
  await assert.rejects(h.wait())
})

test('create takes E2B fields it does not implement, and refuses bad types', async () => {
  const r = await fetch(`${API}/sandboxes`, {
    method: 'POST',
    headers: { 'X-API-KEY': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID: 'base', timeout: 30, autoPause: false, mcp: null, secure: false, metadata: { suite: RUN } }),
  })
  assert.equal(r.status, 201)
  const j = await r.json()
  assert.match(j.sandboxID, /^[a-z0-9]{20}$/)
  assert.equal(j.envdVersion, '0.5.7')
  assert.equal(j.envdAccessToken, undefined, 'secure: false has no token')
  made.push(await Sandbox.connect(j.sandboxID))
  const bad = await fetch(`${API}/sandboxes`, {
    method: 'POST',
    headers: { 'X-API-KEY': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID: 'base', timeout: 'soon' }),
  })
  assert.equal(bad.status, 400)
  const e = await bad.json()
  assert.equal(e.code, 400)
  assert.match(e.message, /timeout/)
  const long = await fetch(`${API}/sandboxes`, {
    method: 'POST',
    headers: { 'X-API-KEY': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID: 'base', timeout: 10 ** 7, envVars: { 'BAD-NAME': 'x' } }),
  })
  assert.equal(long.status, 400)
  assert.match((await long.json()).message, /^(timeout|envVars)\b/, "E2B's field names")
  const noKey = await fetch(`${API}/sandboxes`, { method: 'POST', body: '{}', headers: { 'Content-Type': 'application/json' } })
  assert.equal(noKey.status, 401)
  assert.equal((await noKey.json()).code, 401)
})

// ---- list and pagination ----

test('list: newest first, filtered by metadata and state, in pages', async () => {
  const tag = `${RUN}-list`
  const ids = []
  for (let i = 0; i < 3; i++) ids.push((await create({ metadata: { list: tag } })).sandboxId)
  const p = Sandbox.list({ query: { metadata: { list: tag } }, limit: 2 })
  const first = await p.nextItems()
  assert.equal(first.length, 2)
  assert.equal(p.hasNext, true)
  const second = await p.nextItems()
  assert.equal(second.length, 1)
  assert.equal(p.hasNext, false, 'no X-Next-Token after the last page')
  const got = [...first, ...second].map((s) => s.sandboxId)
  assert.deepEqual(got, [...ids].reverse(), 'newest first')
  for (const s of [...first, ...second]) assert.equal(s.state, 'running')
  const all = await Sandbox.list({ query: { metadata: { list: tag } } }).nextItems()
  assert.equal(all.length, 3)
  const paused = await Sandbox.list({ query: { metadata: { list: tag }, state: ['paused'] } }).nextItems()
  assert.equal(paused.length, 0)
  const none = await Sandbox.list({ query: { metadata: { list: `${tag}-none` } } }).nextItems()
  assert.equal(none.length, 0)
  const odd = await create({ metadata: { 'a key': 'v=1&w 2%' } })
  const found = await Sandbox.list({ query: { metadata: { 'a key': 'v=1&w 2%', suite: RUN } } }).nextItems()
  assert.deepEqual(found.map((s) => s.sandboxId), [odd.sandboxId], 'keys and values with & = % and spaces')
})

// ---- timeout and connect ----

test('setTimeout moves the deadline; connect extends it, never shortens', async () => {
  const sbx = await create()
  await sbx.setTimeout(60_000)
  const a = (await sbx.getInfo()).endAt.getTime()
  assert.ok(Math.abs(a - (Date.now() + 60_000)) < 5_000)
  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 5_000 })
  const b = (await again.getInfo()).endAt.getTime()
  assert.ok(b >= a - 1, 'connect with a shorter timeout leaves the deadline')
  await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600_000 })
  const c = (await sbx.getInfo()).endAt.getTime()
  assert.ok(c > a + 400_000, 'connect with a longer timeout extends it')
  assert.equal((await again.commands.run('echo hi')).stdout, 'hi\n')
})

test('pause, and connect resumes', async () => {
  const sbx = await create({ metadata: { role: 'pause' } })
  await sbx.files.write('/tmp/kept.txt', 'kept')
  assert.equal(await sbx.pause(), true)
  assert.equal((await sbx.getInfo()).state, 'paused')
  const paused = await Sandbox.list({ query: { metadata: { suite: RUN, role: 'pause' }, state: ['paused'] } }).nextItems()
  assert.deepEqual(paused.map((s) => s.sandboxId), [sbx.sandboxId])
  assert.equal(await Sandbox.pause(sbx.sandboxId), false, 'already paused')
  await assert.rejects(sbx.commands.run('true'), 'a paused sandbox runs nothing')
  const back = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await sbx.getInfo()).state, 'running')
  assert.equal((await back.commands.run('cat /tmp/kept.txt')).stdout, 'kept')
})

test('a sandbox whose timeout passes is gone', async () => {
  const sbx = await create({ timeoutMs: 2_000 })
  await new Promise((r) => setTimeout(r, 3_500))
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), NotFoundError)
})

// ---- commands ----

test('commands: stdout, stderr, exit codes', async () => {
  const sbx = await box()
  const r = await sbx.commands.run('echo out; echo err >&2')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'out\n')
  assert.equal(r.stderr, 'err\n')
  await assert.rejects(sbx.commands.run('echo no >&2; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError)
    assert.equal(e.exitCode, 3)
    assert.equal(e.stderr, 'no\n')
    return true
  })
})

test('commands: env, cwd, user, callbacks', async () => {
  const sbx = await box()
  assert.equal((await sbx.commands.run('echo $FOO-$SANDBOX_VAR', { envs: { FOO: 'bar' } })).stdout, 'bar-from-create\n')
  assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
  assert.equal((await sbx.commands.run('id -u', { user: 'root' })).stdout, '0\n')
  assert.equal((await sbx.commands.run('id -u')).stdout, '1000\n')
  const seen = []
  await sbx.commands.run('for i in 1 2 3; do echo $i; done', { onStdout: (d) => seen.push(d) })
  assert.equal(seen.join(''), '1\n2\n3\n')
})

test('commands: background, list, stdin, kill', async () => {
  const sbx = await box()
  const cat = await sbx.commands.run('cat', { background: true, stdin: true })
  const listed = await sbx.commands.list()
  assert.ok(listed.some((p) => p.pid === cat.pid), 'a background command is listed')
  await sbx.commands.sendStdin(cat.pid, 'hello stdin\n')
  await sbx.commands.closeStdin(cat.pid)
  const r = await cat.wait()
  assert.equal(r.stdout, 'hello stdin\n')
  const sleeper = await sbx.commands.run('sleep 60', { background: true })
  assert.equal(await sleeper.kill(), true)
  await assert.rejects(sleeper.wait(), CommandExitError)
  assert.equal(await sbx.commands.kill(999999), false, 'no such process')
  // stdin: false (the default) is closed: cat ends at once; it is /dev/null, as envd's is,
  // and input to it is refused
  assert.equal((await sbx.commands.run('cat')).stdout, '')
  assert.equal((await sbx.commands.run('readlink /proc/self/fd/0')).stdout, '/dev/null\n')
  const quiet = await sbx.commands.run('sleep 30', { background: true })
  await assert.rejects(sbx.commands.sendStdin(quiet.pid, 'x'))
  await quiet.kill()
})

test('commands: connect to a running one', async () => {
  const sbx = await box()
  const h = await sbx.commands.run('sleep 1; echo late', { background: true })
  const again = await sbx.commands.connect(h.pid)
  const r = await again.wait()
  assert.equal(r.stdout, 'late\n')
  await assert.rejects(sbx.commands.connect(h.pid), NotFoundError, 'an exited one is gone')
})

// ---- files ----

test('files: write, read, stat, exists', async () => {
  const sbx = await box()
  const info = await sbx.files.write('/tmp/e2b/a/b.txt', 'hello files')
  assert.equal(info.path, '/tmp/e2b/a/b.txt')
  assert.equal(info.name, 'b.txt')
  assert.equal(await sbx.files.read('/tmp/e2b/a/b.txt'), 'hello files')
  const bytes = await sbx.files.read('/tmp/e2b/a/b.txt', { format: 'bytes' })
  assert.equal(Buffer.from(bytes).toString(), 'hello files')
  const st = await sbx.files.getInfo('/tmp/e2b/a/b.txt')
  assert.equal(st.type, 'file')
  assert.equal(st.size, 11)
  assert.equal((await sbx.files.getInfo('/tmp/e2b/a')).type, 'dir')
  assert.equal(await sbx.files.exists('/tmp/e2b/a/b.txt'), true)
  assert.equal(await sbx.files.exists('/tmp/e2b/nope'), false)
  await assert.rejects(sbx.files.read('/tmp/e2b/nope'), NotFoundError)
  // relative paths are the user's home's
  await sbx.files.write('rel.txt', 'in home')
  assert.equal((await sbx.commands.run('cat /home/user/rel.txt')).stdout, 'in home')
})

test('files: multipart of several, octet-stream with gzip, 1 MiB', async () => {
  const sbx = await box()
  const res = await sbx.files.write([
    { path: '/tmp/e2b/m/one.txt', data: 'one' },
    { path: '/tmp/e2b/m/two.txt', data: new TextEncoder().encode('two').buffer },
  ])
  assert.deepEqual(res.map((w) => w.path), ['/tmp/e2b/m/one.txt', '/tmp/e2b/m/two.txt'])
  assert.equal((await sbx.commands.run('cat /tmp/e2b/m/one.txt /tmp/e2b/m/two.txt')).stdout, 'onetwo')
  await sbx.files.write('/tmp/e2b/gz.txt', 'zipped '.repeat(1000), { gzip: true })
  assert.equal(await sbx.files.read('/tmp/e2b/gz.txt', { gzip: true }), 'zipped '.repeat(1000))
  await sbx.files.write('/tmp/e2b/oct.bin', new Uint8Array([0, 1, 2, 255]).buffer, { useOctetStream: true })
  assert.deepEqual([...(await sbx.files.read('/tmp/e2b/oct.bin', { format: 'bytes' }))], [0, 1, 2, 255])
  const big = new Uint8Array(1 << 20).map((_, i) => (i * 7) & 255)
  await sbx.files.write('/tmp/e2b/big.bin', big.buffer)
  const back = await sbx.files.read('/tmp/e2b/big.bin', { format: 'bytes' })
  assert.equal(back.length, big.length)
  assert.ok(Buffer.from(back).equals(Buffer.from(big)))
})

// test_e2b.py's cordond takes uploads of up to 128 MiB (--max-upload); reads go to its
// --max-download (4 GiB), spooled past 8 MiB.
test('files: 100 MiB written and read back whole', async () => {
  const sbx = await box()
  const big = new Uint8Array(100 << 20).map((_, i) => (i * 13 + (i >> 20)) & 255)
  await sbx.files.write('/tmp/e2b/100m.bin', big.buffer)
  const sum = (await sbx.commands.run('sha256sum /tmp/e2b/100m.bin')).stdout.split(' ')[0]
  const { createHash } = await import('node:crypto')
  assert.equal(sum, createHash('sha256').update(big).digest('hex'))
  const back = await sbx.files.read('/tmp/e2b/100m.bin', { format: 'bytes' })
  assert.equal(back.length, big.length)
  assert.ok(Buffer.from(back).equals(Buffer.from(big)))
  const gz = await sbx.files.read('/tmp/e2b/100m.bin', { format: 'bytes', gzip: true })
  assert.ok(Buffer.from(gz).equals(Buffer.from(big)), 'gzip asked for: sent as it is, whole')
  await sbx.files.remove('/tmp/e2b/100m.bin')
})

test('files: list, makeDir, rename, remove', async () => {
  const sbx = await box()
  assert.equal(await sbx.files.makeDir('/tmp/e2b/d/e'), true)
  assert.equal(await sbx.files.makeDir('/tmp/e2b/d/e'), false, 'it exists')
  await sbx.files.write('/tmp/e2b/d/e/f.txt', 'f')
  const l1 = await sbx.files.list('/tmp/e2b/d')
  assert.deepEqual(l1.map((e) => [e.name, e.type]), [['e', 'dir']])
  const l2 = await sbx.files.list('/tmp/e2b/d', { depth: 2 })
  assert.deepEqual(l2.map((e) => e.path).sort(), ['/tmp/e2b/d/e', '/tmp/e2b/d/e/f.txt'])
  const moved = await sbx.files.rename('/tmp/e2b/d/e/f.txt', '/tmp/e2b/d/g.txt')
  assert.equal(moved.path, '/tmp/e2b/d/g.txt')
  assert.equal(moved.type, 'file')
  assert.equal(await sbx.files.exists('/tmp/e2b/d/e/f.txt'), false)
  await sbx.files.remove('/tmp/e2b/d')
  assert.equal(await sbx.files.exists('/tmp/e2b/d'), false)
})

test('files: a listing of more than one page of the agent\'s walk is whole', async () => {
  const sbx = await box()
  await sbx.commands.run(`python3 -c "import os; os.makedirs('/tmp/e2b/many'); [open(f'/tmp/e2b/many/{i}', 'w').close() for i in range(10050)]"`)
  const l = await sbx.files.list('/tmp/e2b/many')
  assert.equal(l.length, 10050)
  assert.equal(new Set(l.map((e) => e.name)).size, 10050)
  await sbx.files.remove('/tmp/e2b/many')
})

test('files: malformed uploads are a 400 naming what is wrong', async () => {
  const sbx = await box()
  const info = await (await fetch(`${API}/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })).json()
  const h = { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': info.envdAccessToken }
  const post = (q, headers, body) => fetch(`${process.env.E2B_SANDBOX_URL}/files${q}`, { method: 'POST', headers: { ...h, ...headers }, body })
  let r = await post('', { 'Content-Type': 'multipart/form-data; boundary=XX' }, '--XX\r\nContent-Disposition: form-data; filename="/tmp/x"\r\n\r\nno end')
  assert.equal(r.status, 400)
  assert.match((await r.json()).message, /multipart/)
  r = await post('?path=/tmp/e2b/g', { 'Content-Type': 'application/octet-stream', 'Content-Encoding': 'gzip' }, 'not gzip')
  assert.equal(r.status, 400)
  assert.match((await r.json()).message, /gzip/)
  r = await post('', { 'Content-Type': 'application/octet-stream' }, 'x')
  assert.equal(r.status, 400)
  assert.match((await r.json()).message, /path/)
  r = await fetch(`${process.env.E2B_SANDBOX_URL}/files`, { headers: h })
  assert.equal(r.status, 400, 'a download needs a path')
})

// ---- signed URLs ----

// A URL of E2B_SANDBOX_URL sent as E2B's direct URL is: to the host <port>-<id>.<domain>
// (cordond --e2b-domain), with no header naming the sandbox. Loopback only: the Host header
// names the sandbox, the connection goes to cordond.
function direct(sbx, url, { method = 'GET', body, headers = {} } = {}) {
  const u = new URL(url)
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: u.hostname, port: u.port, path: u.pathname + u.search, method,
      headers: { ...headers, Host: `49983-${sbx.sandboxId}.${process.env.CORDON_E2B_DOMAIN}` },
    }, (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString() }))
    })
    req.on('error', reject)
    req.end(body)
  })
}

test('signed URLs: download and upload, expiry, tampering, host routing', async () => {
  const sbx = await box()
  await sbx.files.write('/tmp/e2b/signed.txt', 'signed content')
  const url = await sbx.downloadUrl('/tmp/e2b/signed.txt')
  assert.match(url, /signature=v1_/)
  const r = await direct(sbx, url)
  assert.equal(r.status, 200)
  assert.equal(r.body, 'signed content')
  const bad = new URL(url)
  bad.searchParams.set('signature', 'v1_' + 'A'.repeat(43))
  assert.equal((await direct(sbx, bad)).status, 401)
  const plain = new URL(url)
  plain.searchParams.delete('signature')
  assert.equal((await direct(sbx, plain)).status, 401, 'no token, no signature')
  const other = new URL(url)
  other.searchParams.set('path', '/tmp/e2b/other.txt')
  assert.equal((await direct(sbx, other)).status, 401, 'a signature is for its path')
  const short = await sbx.downloadUrl('/tmp/e2b/signed.txt', { useSignatureExpiration: 1 })
  assert.match(short, /signature_expiration=/)
  await new Promise((res) => setTimeout(res, 2_100))
  assert.equal((await direct(sbx, short)).status, 401, 'expired')
  const up = await sbx.uploadUrl('/tmp/e2b/uploaded.txt')
  const boundary = 'cordon-test-boundary'
  const body = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="/tmp/e2b/uploaded.txt"\r\n` +
    `Content-Type: application/octet-stream\r\n\r\nvia url\r\n--${boundary}--\r\n`
  const u = await direct(sbx, up, { method: 'POST', body, headers: { 'Content-Type': `multipart/form-data; boundary=${boundary}` } })
  assert.equal(u.status, 200)
  assert.equal(await sbx.files.read('/tmp/e2b/uploaded.txt'), 'via url')
})

// ---- metrics ----

test('metrics from the cgroup', async () => {
  const sbx = await box()
  const m = await sbx.getMetrics()
  assert.ok(m.length >= 1)
  const last = m[m.length - 1]
  for (const k of ['cpuUsedPct', 'cpuCount', 'memUsed', 'memTotal', 'diskUsed', 'diskTotal'])
    assert.equal(typeof last[k], 'number', k)
  assert.ok(last.memTotal > 0 && last.diskTotal > 0)
  assert.ok(last.timestamp instanceof Date)
})

// ---- PTY ----

const enc = (t) => new TextEncoder().encode(t)

// Polls @cond (a function) every 50 ms until it holds, at most @ms.
async function until(cond, what, ms = 15_000) {
  const t0 = Date.now()
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what()}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

test('PTY: bash -i, input read back, resize seen by stty, kill', async () => {
  const sbx = await box()
  let out = ''
  const h = await sbx.pty.create({ cols: 80, rows: 24, envs: { FOO: 'bar' }, cwd: '/tmp', user: 'root',
    onData: (d) => { out += Buffer.from(d).toString() } })
  assert.ok(h.pid > 0)
  const seen = (re) => until(() => re.test(out), () => `${re} in ${JSON.stringify(out.slice(-500))}`)
  await sbx.pty.sendInput(h.pid, enc('echo hi-$((6*7)) $FOO $PWD $(id -u) $TERM\n'))
  await seen(/hi-42 bar \/tmp 0 xterm-256color/)
  await sbx.pty.sendInput(h.pid, enc('stty size\n'))
  await seen(/[\r\n]24 80\r\n/)
  await sbx.pty.resize(h.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(h.pid, enc('stty size\n'))
  await seen(/[\r\n]30 100\r\n/)
  assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid), 'a PTY is listed')
  assert.equal(await sbx.pty.kill(h.pid), true)
  await assert.rejects(h.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1, "killed: no exit code")
  assert.equal(await sbx.pty.kill(h.pid), false, 'gone after its kill')
  await assert.rejects(sbx.pty.resize(h.pid, { cols: 10, rows: 10 }), NotFoundError)
})

test('PTY: resizing a process without one is refused; exit ends the handle', async () => {
  const sbx = await box()
  const cat = await sbx.commands.run('cat', { background: true, stdin: true })
  await assert.rejects(sbx.pty.resize(cat.pid, { cols: 100, rows: 30 }), /pty|terminal/)
  await cat.kill()
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} })
  await sbx.pty.sendInput(h.pid, enc('exit 5\n'))
  await assert.rejects(h.wait(), (e) => e instanceof CommandExitError && e.exitCode === 5)
})

test('StreamInput: a client stream of envelopes, start first, then the input in order', async () => {
  const sbx = await box()
  const cat = await sbx.commands.run('cat', { background: true, stdin: true })
  const info = await (await fetch(`${API}/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })).json()
  const env = (m) => {
    const b = Buffer.from(JSON.stringify(m))
    const h = Buffer.alloc(5)
    h.writeUInt32BE(b.length, 1)
    return Buffer.concat([h, b])
  }
  const b64 = (t) => Buffer.from(t).toString('base64')
  const send = (body) => fetch(`${process.env.E2B_SANDBOX_URL}/process.Process/StreamInput`, {
    method: 'POST', body,
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': info.envdAccessToken, 'Content-Type': 'application/connect+json' },
  })
  const r = await send(Buffer.concat([env({ start: { process: { pid: cat.pid } } }), env({ data: { input: { stdin: b64('one ') } } }),
    env({ keepalive: {} }), env({ data: { input: { stdin: b64('two\n') } } })]))
  assert.equal(r.status, 200)
  const buf = Buffer.from(await r.arrayBuffer())
  assert.equal(buf[5 + buf.readUInt32BE(1)], 2, 'a message, then the END envelope')
  const early = Buffer.from(await (await send(env({ data: { input: { stdin: b64('x') } } }))).arrayBuffer())
  assert.equal(JSON.parse(early.subarray(5).toString()).error.code, 'invalid_argument', 'data before start')
  await sbx.commands.closeStdin(cat.pid)
  assert.equal((await cat.wait()).stdout, 'one two\n')
})

// ---- watch ----

test('watchDir: create, write, remove, recursive, and the handle stops', async () => {
  const sbx = await box()
  await sbx.files.makeDir('/tmp/e2b/w/sub')
  const flat = [], deep = []
  const w1 = await sbx.files.watchDir('/tmp/e2b/w', (e) => flat.push(e))
  const w2 = await sbx.files.watchDir('/tmp/e2b/w', (e) => deep.push(e), { recursive: true, timeoutMs: 60_000 })
  await sbx.commands.run('echo a > /tmp/e2b/w/a.txt; echo more >> /tmp/e2b/w/a.txt; echo b > /tmp/e2b/w/sub/b.txt; rm /tmp/e2b/w/a.txt')
  const has = (l, name, type) => l.some((e) => e.name === name && e.type === type)
  const show = (l) => () => JSON.stringify(l)
  await until(() => has(flat, 'a.txt', FilesystemEventType.REMOVE), show(flat))
  assert.ok(has(flat, 'a.txt', FilesystemEventType.CREATE), 'create')
  assert.ok(has(flat, 'a.txt', FilesystemEventType.WRITE), 'write')
  await until(() => has(deep, 'sub/b.txt', FilesystemEventType.CREATE), show(deep))
  assert.ok(!flat.some((e) => e.name.startsWith('sub/')), 'not recursive: nothing from sub/')
  await sbx.commands.run('chmod 600 /tmp/e2b/w/sub/b.txt; mv /tmp/e2b/w/sub/b.txt /tmp/e2b/w/sub/c.txt')
  await until(() => has(deep, 'sub/b.txt', FilesystemEventType.RENAME), show(deep))
  assert.ok(has(deep, 'sub/b.txt', FilesystemEventType.CHMOD), 'chmod')
  await w1.stop()
  await w2.stop()
  await assert.rejects(sbx.files.watchDir('/tmp/e2b/nope', () => {}), NotFoundError)
})

// One unary envd call, raw.
async function envdCall(sbx, method, msg) {
  const info = await (await fetch(`${API}/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })).json()
  const r = await fetch(`${process.env.E2B_SANDBOX_URL}/${method}`, {
    method: 'POST', body: JSON.stringify(msg),
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': info.envdAccessToken, 'Content-Type': 'application/json' },
  })
  return { status: r.status, body: await r.json() }
}

test('the polling watcher: CreateWatcher, GetWatcherEvents, RemoveWatcher', async () => {
  const sbx = await box()
  await sbx.files.makeDir('/tmp/e2b/pw')
  const FS = 'filesystem.Filesystem'
  const c = await envdCall(sbx, `${FS}/CreateWatcher`, { path: '/tmp/e2b/pw', recursive: true })
  assert.equal(c.status, 200)
  assert.match(c.body.watcherId, /^[0-9a-f]{32}$/)
  await sbx.commands.run('mkdir /tmp/e2b/pw/d; echo x > /tmp/e2b/pw/d/f')
  const events = []
  for (let i = 0; i < 100 && !events.some((e) => e.name === 'd/f'); i++) {
    const g = await envdCall(sbx, `${FS}/GetWatcherEvents`, { watcherId: c.body.watcherId })
    assert.equal(g.status, 200)
    events.push(...g.body.events)
    await new Promise((r) => setTimeout(r, 50))
  }
  assert.ok(events.some((e) => e.name === 'd' && e.type === 'EVENT_TYPE_CREATE'), JSON.stringify(events))
  assert.ok(events.some((e) => e.name === 'd/f' && e.type === 'EVENT_TYPE_CREATE'), 'recursive, into a new directory')
  const again = await envdCall(sbx, `${FS}/GetWatcherEvents`, { watcherId: c.body.watcherId })
  assert.deepEqual(again.body.events ?? [], [], 'each event once')
  assert.equal((await envdCall(sbx, `${FS}/RemoveWatcher`, { watcherId: c.body.watcherId })).status, 200)
  const gone = await envdCall(sbx, `${FS}/GetWatcherEvents`, { watcherId: c.body.watcherId })
  assert.equal(gone.status, 404)
  assert.equal(gone.body.code, 'not_found')
  const file = await envdCall(sbx, `${FS}/CreateWatcher`, { path: '/etc/hostname' })
  assert.equal(file.status, 400, 'a file is no directory')
  const none = await envdCall(sbx, `${FS}/CreateWatcher`, { path: '/tmp/e2b/nope' })
  assert.equal(none.status, 404)
})

// ---- ports by host: <port>-<id>.<domain> ----

// @port of @sbx by host, sent to cordond's own listener on loopback with the Host header E2B's
// URL would carry (no resolver needed): {status, body}.
function byHost(id, port, path = '/', headers = {}) {
  const u = new URL(process.env.E2B_SANDBOX_URL)
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path,
      headers: { ...headers, Host: `${port}-${id}.${process.env.CORDON_E2B_DOMAIN}` } }, (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString() }))
    })
    req.on('error', reject)
    req.end()
  })
}

test('ports by host: a server inside, its token, nothing listening, an unknown sandbox', async () => {
  const sbx = await box()
  const info = await (await fetch(`${API}/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })).json()
  const tok = { 'E2b-Traffic-Access-Token': info.envdAccessToken }
  await sbx.files.write('/tmp/e2b/www/hello.txt', 'served from inside')
  const srv = await sbx.commands.run('cd /tmp/e2b/www && exec python3 -m http.server 8000 --bind 127.0.0.1', { background: true })
  let r
  for (let i = 0; i < 200 && r?.status !== 200; i++) {
    r = await byHost(sbx.sandboxId, 8000, '/hello.txt', tok)
    if (r.status !== 200) await new Promise((res) => setTimeout(res, 100))
  }
  assert.equal(r.status, 200, JSON.stringify(r))
  assert.equal(r.body, 'served from inside')
  const noTok = await byHost(sbx.sandboxId, 8000, '/hello.txt')
  assert.equal(noTok.status, 401, 'a secure sandbox\'s ports need its token')
  assert.equal(JSON.parse(noTok.body).code, 401)
  const closed = await byHost(sbx.sandboxId, 8001, '/', tok)
  assert.equal(closed.status, 502)
  assert.match(JSON.parse(closed.body).message, /port_unreachable/)
  const unknown = await byHost('a'.repeat(20), 8000, '/')
  assert.equal(unknown.status, 502)
  assert.equal(JSON.parse(unknown.body).code, 502)
  assert.equal(sbx.getHost(8000).split('.')[0], `8000-${sbx.sandboxId}`, "the SDK's name for it")
  await srv.kill()
})

test('ports by host: a sandbox made with secure: false takes no token', async () => {
  const sbx = await create({ secure: false })
  const srv = await sbx.commands.run('mkdir -p /tmp/open && cd /tmp/open && echo open > o.txt && exec python3 -m http.server 8002 --bind 127.0.0.1', { background: true })
  let r
  for (let i = 0; i < 200 && r?.status !== 200; i++) {
    r = await byHost(sbx.sandboxId, 8002, '/o.txt')
    if (r.status !== 200) await new Promise((res) => setTimeout(res, 100))
  }
  assert.equal(r.status, 200, JSON.stringify(r))
  assert.equal(r.body, 'open\n')
  await srv.kill()
})

// ---- one key never reaches another key's sandbox ----

test('another key sees nothing of this sandbox', async () => {
  const sbx = await box()
  const other = { apiKey: KEY2 }
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId, other), NotFoundError)
  assert.equal(await Sandbox.kill(sbx.sandboxId, other), false)
  await assert.rejects(Sandbox.connect(sbx.sandboxId, other))
  await assert.rejects(Sandbox.setTimeout(sbx.sandboxId, 1_000, other))
  const listed = await Sandbox.list({ ...other, query: { metadata: { suite: RUN } } }).nextItems()
  assert.equal(listed.length, 0)
  // envd by id alone: a secure sandbox needs its token
  const r = await fetch(`${process.env.E2B_SANDBOX_URL}/process.Process/List`, {
    method: 'POST',
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'Content-Type': 'application/json' },
    body: '{}',
  })
  assert.equal(r.status, 401)
  assert.equal((await r.json()).code, 'unauthenticated')
  const wrong = await fetch(`${process.env.E2B_SANDBOX_URL}/process.Process/List`, {
    method: 'POST',
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': 'f'.repeat(64), 'Content-Type': 'application/json' },
    body: '{}',
  })
  assert.equal(wrong.status, 401)
  // and the sandbox is still fine
  assert.equal((await sbx.commands.run('echo still')).stdout, 'still\n')
})

// ---- the protocol itself ----

test('Connect: a bad envelope, an unknown sandbox', async () => {
  const sbx = await box()
  const info = await fetch(`${API}/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })
  const token = (await info.json()).envdAccessToken
  assert.match(token, /^[0-9a-f]{64}$/)
  const h = { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': token, 'Content-Type': 'application/connect+json' }
  const r = await fetch(`${process.env.E2B_SANDBOX_URL}/process.Process/Start`, { method: 'POST', headers: h, body: 'not an envelope' })
  assert.equal(r.status, 200, 'a stream answers its error in the end envelope')
  const buf = Buffer.from(await r.arrayBuffer())
  assert.equal(buf[0], 2, 'END flag')
  const end = JSON.parse(buf.subarray(5, 5 + buf.readUInt32BE(1)).toString())
  assert.equal(end.error.code, 'invalid_argument')
  const u = await fetch(`${process.env.E2B_SANDBOX_URL}/process.Process/List`, {
    method: 'POST',
    headers: { 'E2b-Sandbox-Id': 'a'.repeat(20), 'Content-Type': 'application/json' },
    body: '{}',
  })
  assert.equal(u.status, 502)
  assert.ok(SandboxError)
})

// One server-streaming Start, raw: its envelopes until the END one.
async function rawStart(sbx, cmd, headers = {}) {
  const info = await (await fetch(`${API}/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })).json()
  const msg = Buffer.from(JSON.stringify({ process: { cmd: '/bin/sh', args: ['-c', cmd] } }))
  const head = Buffer.alloc(5)
  head.writeUInt32BE(msg.length, 1)
  const r = await fetch(`${process.env.E2B_SANDBOX_URL}/process.Process/Start`, {
    method: 'POST',
    body: Buffer.concat([head, msg]),
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': info.envdAccessToken,
      'Content-Type': 'application/connect+json', ...headers },
  })
  const buf = Buffer.from(await r.arrayBuffer())
  const out = []
  for (let o = 0; o + 5 <= buf.length; o += 5 + buf.readUInt32BE(o + 1))
    out.push({ flags: buf[o], msg: JSON.parse(buf.subarray(o + 5, o + 5 + buf.readUInt32BE(o + 1)).toString()) })
  return out
}

test('Connect: start, data and end events, an END envelope', async () => {
  const sbx = await box()
  const ev = await rawStart(sbx, 'echo hi; exit 4')
  assert.ok(ev[0].msg.event.start.pid > 0)
  assert.equal(Buffer.from(ev[1].msg.event.data.stdout, 'base64').toString(), 'hi\n')
  const end = ev[ev.length - 2].msg.event.end
  assert.equal(end.exitCode, 4)
  assert.equal(end.exited, true)
  assert.equal(end.status, 'exit status 4')
  assert.deepEqual(ev[ev.length - 1], { flags: 2, msg: {} })
})

test('Connect: keepalives, and Connect-Timeout-Ms ends a stream with deadline_exceeded', async () => {
  const sbx = await box()
  const ev = await rawStart(sbx, 'sleep 5', { 'Keepalive-Ping-Interval': '1', 'Connect-Timeout-Ms': '2500' })
  assert.ok(ev.some((e) => e.msg.event && 'keepalive' in e.msg.event), 'a keepalive each second')
  const last = ev[ev.length - 1]
  assert.equal(last.flags, 2)
  assert.equal(last.msg.error.code, 'deadline_exceeded')
})
