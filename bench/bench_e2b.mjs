// bench_e2b.mjs: E2B's SDK against cordond's E2B surface, and Cordon's own API from the same
// node process in the same run (bench_e2b.py starts cordond and runs this). Prints one JSON
// line. Environment: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (the E2B listener),
// CORDON_URL (--listen), BENCH_N (iterations), BENCH_BIG (bytes of the big file, 0: none).
// tests/e2b's copy of the SDK, as its package-lock.json pins it (npm ci there)
import fs from 'node:fs'
const { Sandbox } = await import(new URL('../tests/e2b/node_modules/e2b/dist/index.mjs', import.meta.url))

const N = Number(process.env.BENCH_N ?? 50)
const BIG = Number(process.env.BENCH_BIG ?? 100 << 20)
const V1 = process.env.CORDON_URL
const auth = { Authorization: `Bearer ${process.env.E2B_API_KEY}`, 'Content-Type': 'application/json' }

const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6
const now = () => process.hrtime.bigint()
// CPU time so far, ms: this process's (the client: the SDK or fetch) and cordond's main
// thread's (CORDOND_PID; its schedstat is in ns), to tell whose work a figure is.
const clientCpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000 }
const serverCpu = () => {
  try {
    return Number(fs.readFileSync(`/proc/${process.env.CORDOND_PID}/schedstat`, 'utf8').split(' ')[0]) / 1e6
  } catch {
    return NaN
  }
}
function stats(xs, cpu) {
  const s = [...xs].sort((a, b) => a - b)
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))]
  const out = { p50_ms: +q(0.5).toFixed(3), p99_ms: +q(0.99).toFixed(3), n: s.length }
  if (cpu) {
    out.client_cpu_ms = +(cpu.client / s.length).toFixed(3)
    out.server_cpu_ms = +(cpu.server / s.length).toFixed(3)
  }
  return out
}

// @fn() timed into @xs, its CPU (client and cordond's loop) added to @cpu.
async function measure(xs, cpu, fn) {
  const c0 = clientCpu(), s0 = serverCpu(), t = now()
  const r = await fn()
  xs.push(ms(t))
  cpu.client += clientCpu() - c0
  cpu.server += serverCpu() - s0
  return r
}
const newCpu = () => ({ client: 0, server: 0 })

async function v1(method, path, body) {
  const r = await fetch(`${V1}${path}`, { method, headers: auth, body: body && JSON.stringify(body) })
  if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`)
  return r.status === 204 ? null : r.json()
}

// Sandbox.create() to the end of its first commands.run('true'), against POST /v1/sandboxes
// then POST .../exec ["true"] and, the fair peer, exec of the argv the SDK runs
// (`/bin/bash -l -c true`), with the same network (@internet: E2B's default, Cordon's
// "public"; else none); interleaved, each sandbox killed after (not timed).
async function createToFirstCommand(internet) {
  const policy = internet ? 'public' : 'deny'
  const own = async (argv) => {
    const s = await v1('POST', '/v1/sandboxes', { timeout_s: 60, network: { policy } })
    await v1('POST', `/v1/sandboxes/${s.id}/exec`, { argv })
    return () => v1('DELETE', `/v1/sandboxes/${s.id}`)
  }
  const series = {
    e2b: async () => {
      const sbx = await Sandbox.create({ timeoutMs: 60_000, allowInternetAccess: internet })
      await sbx.commands.run('true')
      return () => sbx.kill()
    },
    cordon: () => own(['true']),
    cordon_bash_l: () => own(['/bin/bash', '-l', '-c', 'true']),
  }
  const xs = {}, cpu = {}
  for (let i = 0; i < N; i++) {
    for (const [k, fn] of Object.entries(series)) {
      const kill = await measure((xs[k] ??= []), (cpu[k] ??= newCpu()), fn)
      await kill()
    }
  }
  return Object.fromEntries(Object.keys(series).map((k) => [k, stats(xs[k], cpu[k])]))
}

// commands.run('true') (which runs `/bin/bash -l -c true`) against exec ["true"] and, to
// tell the surface's cost from the login shell's, exec of the same argv.
async function commandRoundTrip(sbx, id) {
  const series = {
    e2b: () => sbx.commands.run('true'),
    cordon: () => v1('POST', `/v1/sandboxes/${id}/exec`, { argv: ['true'] }),
    cordon_bash_l: () => v1('POST', `/v1/sandboxes/${id}/exec`, { argv: ['/bin/bash', '-l', '-c', 'true'] }),
  }
  const xs = {}, cpu = {}
  for (let i = 0; i < N; i++)
    for (const [k, fn] of Object.entries(series))
      await measure((xs[k] ??= []), (cpu[k] ??= newCpu()), fn)
  return Object.fromEntries(Object.keys(series).map((k) => [k, stats(xs[k], cpu[k])]))
}

async function timed(runs, fn) {
  const xs = [], cpu = newCpu()
  for (let i = 0; i < runs; i++)
    await measure(xs, cpu, fn)
  return stats(xs, cpu)
}

// files.write then files.read of @bytes, against PUT and GET /v1/.../files of the same bytes
// on Cordon's sandbox @id, each measured on its own (a failure is reported).
async function fileRoundTrip(sbx, id, bytes, runs) {
  const data = new Uint8Array(bytes).map((_, i) => (i * 31) & 255)
  const url = `${V1}/v1/sandboxes/${id}/files?path=/tmp/bench.bin`
  const check = (n) => { if (n !== bytes) throw new Error(`read ${n} of ${bytes} bytes`) }
  const out = {}
  for (const [name, fn] of [
    ['write', () => sbx.files.write('/tmp/bench.bin', data.buffer)],
    ['read', async () => check((await sbx.files.read('/tmp/bench.bin', { format: 'bytes' })).length)],
    ['cordon_write', async () => {
      const r = await fetch(url, { method: 'PUT', headers: { Authorization: auth.Authorization }, body: data })
      if (r.status !== 200) throw new Error(`PUT: ${r.status} ${await r.text()}`)
    }],
    ['cordon_read', async () => check((await (await fetch(url, { headers: { Authorization: auth.Authorization } })).arrayBuffer()).byteLength)],
  ]) {
    try {
      out[name] = await timed(runs, fn)
    } catch (e) {
      out[name] = { error: String(e.message ?? e).slice(0, 160) }
    }
  }
  return out
}

// A PTY round trip: a line of input to `bash -i` until its output is back (the line the echo
// prints, which the terminal's own echo of the input does not contain), on one PTY made
// first (not timed). @open: the PTY, {send(text), kill()}; @seen(): the output so far;
// @wait(): a promise of the next output.
async function ptyLoop(open, seen, wait) {
  const p = await open()
  const xs = []
  for (let i = 0; i < N; i++) {
    const from = seen().length
    const t = now()
    await p.send(`echo m''${i}x\n`)
    while (!seen().slice(from).includes(`m${i}x\r\n`)) await wait()
    xs.push(ms(t))
  }
  await p.kill()
  return stats(xs)
}

// Output into out.text, each chunk waking the waiter.
function collector() {
  const o = { text: '', wake: () => {} }
  o.add = (d) => { o.text += Buffer.from(d).toString(); o.wake() }
  o.wait = () => new Promise((r) => { o.wake = r })
  return o
}

// E2B's sbx.pty against Cordon's POST .../processes {pty} (its NDJSON stream read here) and
// .../stdin, on sandboxes of both.
async function ptyRoundTrip(sbx, id) {
  const a = collector(), b = collector()
  const e2b = await ptyLoop(async () => {
    const h = await sbx.pty.create({ cols: 80, rows: 24, onData: a.add })
    return { send: (t) => sbx.pty.sendInput(h.pid, new TextEncoder().encode(t)), kill: () => sbx.pty.kill(h.pid) }
  }, () => a.text, a.wait)
  const own = await ptyLoop(async () => {
    const r = await fetch(`${V1}/v1/sandboxes/${id}/processes`, { method: 'POST', headers: auth,
      body: JSON.stringify({ argv: ['/bin/bash', '-i'], pty: { cols: 80, rows: 24 } }) })
    const rd = r.body.getReader(), dec = new TextDecoder()
    let pid, buf = ''
    const started = new Promise((res) => {
      (async () => {
        for (;;) {
          const { value, done } = await rd.read()
          if (done) return
          buf += dec.decode(value, { stream: true })
          for (let i; (i = buf.indexOf('\n')) >= 0; buf = buf.slice(i + 1)) {
            const ev = JSON.parse(buf.slice(0, i))
            if (ev.type === 'start') res(pid = ev.pid)
            if (ev.type === 'stdout') b.add(Buffer.from(ev.data, 'base64'))
          }
        }
      })()
    })
    await started
    return {
      send: (t) => v1('POST', `/v1/sandboxes/${id}/processes/${pid}/stdin`, { data: Buffer.from(t).toString('base64') }),
      kill: () => v1('POST', `/v1/sandboxes/${id}/processes/${pid}/signal`, { signal: 'SIGKILL' }),
    }
  }, () => b.text, b.wait)
  return { e2b, cordon: own }
}

// runCode('1+1') of @e2b/code-interpreter against POST /v1/.../code on the same sandbox (an
// E2B sandbox is its key's on /v1 too) and its default context, interleaved.
async function codeRoundTrip() {
  const { Sandbox: CodeSandbox } = await import(new URL('../tests/e2b/node_modules/@e2b/code-interpreter/dist/index.mjs', import.meta.url))
  const sbx = await CodeSandbox.create({ timeoutMs: 600_000 })
  const path = `/v1/sandboxes/sb-${sbx.sandboxId}/code`
  const cell = async () => {
    const r = await fetch(`${V1}${path}`, { method: 'POST', headers: auth, body: '{"code": "1+1"}' })
    const text = await r.text()
    if (r.status !== 200 || !text.includes('"text/plain":"2"')) throw new Error(`${r.status} ${text.slice(0, 200)}`)
  }
  await sbx.runCode('1+1')
  await cell()
  const e2b = [], own = []
  for (let i = 0; i < N; i++) {
    let t = now()
    const r = await sbx.runCode('1+1')
    e2b.push(ms(t))
    if (r.text !== '2') throw new Error(`runCode: ${JSON.stringify(r)}`)
    t = now()
    await cell()
    own.push(ms(t))
  }
  await sbx.kill()
  return { e2b_run_code: stats(e2b), cordon_code: stats(own) }
}

// BENCH_TRACE: the requests of @N creates to first command of each API, one JSON line per
// request (undici's diagnostics channels, which the SDK's undici and node's fetch both
// publish): when it was made, its head sent, its response head in and its end, ms from the
// iteration's start, and the connections opened.
async function trace() {
  const dc = await import('node:diagnostics_channel')
  const t0 = { at: now() }
  const at = () => +ms(t0.at).toFixed(3)
  const reqs = new WeakMap()
  let conns = 0
  const rec = (r) => reqs.get(r) ?? reqs.set(r, { method: r.method, path: r.path.split('?')[0] }).get(r)
  dc.subscribe('undici:request:create', ({ request }) => { rec(request).made = at() })
  dc.subscribe('undici:client:sendHeaders', ({ request }) => { rec(request).sent = at() })
  dc.subscribe('undici:request:headers', ({ request, response }) => Object.assign(rec(request), { head: at(), status: response.statusCode }))
  dc.subscribe('undici:request:trailers', ({ request }) => { rec(request).end = at(); lines.push(rec(request)) })
  dc.subscribe('undici:client:connected', () => { conns++ })
  let lines = []
  const runs = {
    e2b: async () => { const s = await Sandbox.create({ timeoutMs: 60_000 }); await s.commands.run('true'); return () => s.kill() },
    cordon: async () => {
      const s = await v1('POST', '/v1/sandboxes', { timeout_s: 60, network: { policy: 'public' } })
      await v1('POST', `/v1/sandboxes/${s.id}/exec`, { argv: ['/bin/bash', '-l', '-c', 'true'] })
      return () => v1('DELETE', `/v1/sandboxes/${s.id}`)
    },
  }
  for (let i = 0; i < N; i++) {
    for (const [api, fn] of Object.entries(runs)) {
      lines = []
      const c0 = conns
      t0.at = now()
      const kill = await fn()
      console.log(JSON.stringify({ api, i, total_ms: at(), connections: conns - c0, requests: lines }))
      await kill()
    }
  }
}

const out = { bench: 'e2b', n: N }
if (process.env.BENCH_TRACE) {
  await trace()
  process.exit(0)
}
if (process.env.BENCH_CODE_ONLY) {
  out.code = await codeRoundTrip()
  console.log(JSON.stringify(out))
  process.exit(0)
}
out.create_to_first_command = await createToFirstCommand(true)
out.create_to_first_command_no_network = await createToFirstCommand(false)
const sbx = await Sandbox.create({ timeoutMs: 600_000 })
const own = await v1('POST', '/v1/sandboxes', { timeout_s: 600 })
out.command = await commandRoundTrip(sbx, own.id)
out.pty_round_trip = await ptyRoundTrip(sbx, own.id)
out.file_1mib = await fileRoundTrip(sbx, own.id, 1 << 20, Math.min(N, 20))
if (BIG) {
  out.file_big = { bytes: BIG, ...(await fileRoundTrip(sbx, own.id, BIG, 3)) }
}
await sbx.kill()
await v1('DELETE', `/v1/sandboxes/${own.id}`)
console.log(JSON.stringify(out))
