// bench_e2b.mjs: E2B's SDK against cordond's E2B surface, and Cordon's own API from the same
// node process in the same run (bench_e2b.py starts cordond and runs this). Prints one JSON
// line. Environment: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (the E2B listener),
// CORDON_URL (--listen), BENCH_N (iterations), BENCH_BIG (bytes of the big file, 0: none).
// tests/e2b's copy of the SDK, as its package-lock.json pins it (npm ci there)
const { Sandbox } = await import(new URL('../tests/e2b/node_modules/e2b/dist/index.mjs', import.meta.url))

const N = Number(process.env.BENCH_N ?? 50)
const BIG = Number(process.env.BENCH_BIG ?? 100 << 20)
const V1 = process.env.CORDON_URL
const auth = { Authorization: `Bearer ${process.env.E2B_API_KEY}`, 'Content-Type': 'application/json' }

const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6
const now = () => process.hrtime.bigint()
function stats(xs) {
  const s = [...xs].sort((a, b) => a - b)
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))]
  return { p50_ms: +q(0.5).toFixed(3), p99_ms: +q(0.99).toFixed(3), n: s.length }
}

async function v1(method, path, body) {
  const r = await fetch(`${V1}${path}`, { method, headers: auth, body: body && JSON.stringify(body) })
  if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`)
  return r.status === 204 ? null : r.json()
}

// Sandbox.create() to the end of its first commands.run('true'), against POST /v1/sandboxes
// then POST .../exec ["true"], with the same network (@internet: E2B's default, Cordon's
// "public"; else none); interleaved, each sandbox killed after (not timed).
async function createToFirstCommand(internet) {
  const e2b = [], own = []
  for (let i = 0; i < N; i++) {
    let t = now()
    const sbx = await Sandbox.create({ timeoutMs: 60_000, allowInternetAccess: internet })
    await sbx.commands.run('true')
    e2b.push(ms(t))
    await sbx.kill()
    t = now()
    const s = await v1('POST', '/v1/sandboxes', { timeout_s: 60, network: { policy: internet ? 'public' : 'deny' } })
    await v1('POST', `/v1/sandboxes/${s.id}/exec`, { argv: ['true'] })
    own.push(ms(t))
    await v1('DELETE', `/v1/sandboxes/${s.id}`)
  }
  return { e2b: stats(e2b), cordon: stats(own) }
}

// commands.run('true') (which runs `/bin/bash -l -c true`) against exec ["true"] and, to
// tell the surface's cost from the login shell's, exec of the same argv.
async function commandRoundTrip(sbx, id) {
  const e2b = [], own = [], same = []
  for (let i = 0; i < N; i++) {
    let t = now()
    await sbx.commands.run('true')
    e2b.push(ms(t))
    t = now()
    await v1('POST', `/v1/sandboxes/${id}/exec`, { argv: ['true'] })
    own.push(ms(t))
    t = now()
    await v1('POST', `/v1/sandboxes/${id}/exec`, { argv: ['/bin/bash', '-l', '-c', 'true'] })
    same.push(ms(t))
  }
  return { e2b: stats(e2b), cordon: stats(own), cordon_bash_l: stats(same) }
}

async function timed(runs, fn) {
  const xs = []
  for (let i = 0; i < runs; i++) {
    const t = now()
    await fn()
    xs.push(ms(t))
  }
  return stats(xs)
}

// files.write then files.read of @bytes, each measured on its own (a failure is reported).
async function fileRoundTrip(sbx, bytes, runs) {
  const data = new Uint8Array(bytes).map((_, i) => (i * 31) & 255)
  const out = {}
  for (const [name, fn] of [
    ['write', () => sbx.files.write('/tmp/bench.bin', data.buffer)],
    ['read', async () => {
      const back = await sbx.files.read('/tmp/bench.bin', { format: 'bytes' })
      if (back.length !== bytes) throw new Error(`read ${back.length} of ${bytes} bytes`)
    }],
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

const out = { bench: 'e2b', n: N }
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
out.file_1mib = await fileRoundTrip(sbx, 1 << 20, Math.min(N, 20))
if (BIG) {
  out.file_big = { bytes: BIG, ...(await fileRoundTrip(sbx, BIG, 3)) }
}
await sbx.kill()
await v1('DELETE', `/v1/sandboxes/${own.id}`)
console.log(JSON.stringify(out))
