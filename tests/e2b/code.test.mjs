// E2B's code interpreter SDK (the npm package `@e2b/code-interpreter`, pinned in package.json)
// against cordond: Sandbox.create() with its default template, runCode and the contexts, over
// the routes of port 49999 (src/daemon/e2b_code.c). Run by tests/e2b/test_e2b_code.py, which
// starts cordond with a built code-interpreter template and sets E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY and CORDON_E2B_DOMAIN. What the SDK does is the specification.
import { test, after } from 'node:test'
import http from 'node:http'
import assert from 'node:assert/strict'
import { Sandbox, TimeoutError, NotFoundError, SandboxError } from '@e2b/code-interpreter'

const made = []
// test_e2b_code.py: the store's template has this recipe's server (else its newer tests skip)
const fresh = process.env.CORDON_CODE_SERVER_FRESH === '1'
let shared

async function create() {
  const sbx = await Sandbox.create({ timeoutMs: 600_000 })
  made.push(sbx)
  return sbx
}

async function box() {
  shared ??= await create()
  return shared
}

after(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => {})))
})

// A request as the SDK makes it, with @headers of our own; {status, body}.
function raw(sbx, path, headers, body = '{"code": "1"}', host) {
  const u = new URL(process.env.E2B_SANDBOX_URL)
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: u.hostname, port: u.port, path, method: 'POST',
      headers: { 'Content-Type': 'application/json', ...(host ? { Host: host } : {}), ...headers },
      timeout: 60_000,
    }, (res) => {
      let data = ''
      res.on('data', (d) => { data += d })
      res.on('end', () => resolve({ status: res.statusCode, body: data }))
    })
    req.on('error', reject)
    req.end(body)
  })
}

// runCode leaves its request timer (requestTimeoutMs, 60 s by default) running when it throws
// on an HTTP status, which keeps node up: a call expected to fail so gets a short one.

test('create() makes the code-interpreter template; runCode keeps state between cells', async () => {
  const sbx = await box()
  assert.equal((await sbx.getInfo()).templateId, 'code-interpreter')
  let r = await sbx.runCode('x = 41')
  assert.equal(r.error, undefined)
  assert.deepEqual(r.results, [])
  r = await sbx.runCode('x + 1')
  assert.equal(r.text, '42')
  assert.equal(r.results.length, 1)
  assert.equal(r.results[0].isMainResult, true)
  assert.ok(r.executionCount >= 2, `execution count ${r.executionCount}`)
  assert.equal((await sbx.runCode("'a' + 'b'")).text, 'ab', "a repr's quotes go, as E2B's")
  assert.equal((await sbx.runCode('x', { language: 'python' })).text, '41', 'python is the default context')
})

test('stdout and stderr reach their callbacks and the logs', async () => {
  const sbx = await box()
  const out = [], err = []
  const r = await sbx.runCode('import sys\nprint("hello")\nprint("oops", file=sys.stderr)', {
    onStdout: (m) => out.push(m), onStderr: (m) => err.push(m),
  })
  assert.equal(r.logs.stdout.join(''), 'hello\n')
  assert.equal(r.logs.stderr.join(''), 'oops\n')
  assert.equal(out.map((m) => m.line).join(''), 'hello\n')
  assert.equal(err.map((m) => m.line).join(''), 'oops\n')
  assert.equal(out[0].error, false)
  assert.equal(err[0].error, true)
  assert.equal(r.error, undefined)
})

test('a matplotlib figure is a PNG result', async () => {
  const sbx = await box()
  const seen = []
  const r = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()', {
    onResult: (x) => seen.push(x),
  })
  assert.equal(r.error, undefined, JSON.stringify(r.error))
  const png = r.results.find((x) => x.png)
  assert.ok(png, `formats: ${JSON.stringify(r.results.map((x) => x.formats()))}`)
  assert.equal(png.isMainResult, false, 'a display, not the value of the cell')
  assert.ok(png.formats().includes('png'))
  assert.deepEqual([...Buffer.from(png.png, 'base64').subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47])
  assert.equal(seen.length, r.results.length, 'onResult saw each result')
})

test('a DataFrame is an HTML result, its records as JSON', async () => {
  const sbx = await box()
  const r = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", "y"]})')
  assert.equal(r.error, undefined, JSON.stringify(r.error))
  const res = r.results[0]
  assert.equal(res.isMainResult, true)
  assert.match(res.html, /<table/)
  assert.match(res.text, /a\s+b/)
  assert.deepEqual(res.json, [{ a: 1, b: 'x' }, { a: 2, b: 'y' }])
  assert.ok(res.formats().includes('html'))
  assert.deepEqual(JSON.parse(JSON.stringify(r)).results[0].html, res.html, 'toJSON keeps it')
})

test('an exception is an ExecutionError with name, value and traceback', async () => {
  const sbx = await box()
  const errs = []
  const r = await sbx.runCode('print("before")\n1 / 0', { onError: (e) => errs.push(e) })
  assert.equal(r.error.name, 'ZeroDivisionError')
  assert.equal(r.error.value, 'division by zero')
  assert.match(r.error.traceback, /ZeroDivisionError/)
  assert.equal(errs.length, 1)
  assert.equal(errs[0].name, 'ZeroDivisionError')
  assert.deepEqual(r.logs.stdout, ['before\n'])
  assert.equal((await sbx.runCode('x')).text, '41', 'the context lives on')
})

test('contexts: their own state and cwd, listed, restarted, removed', async () => {
  const sbx = await box()
  const ctx = await sbx.createCodeContext({ cwd: '/tmp', language: 'python' })
  assert.match(ctx.id, /^[A-Za-z0-9_-]+$/)
  assert.equal(ctx.language, 'python')
  assert.equal(ctx.cwd, '/tmp')
  await sbx.runCode('y = 7', { context: ctx })
  assert.equal((await sbx.runCode('y', { context: ctx })).text, '7')
  assert.equal((await sbx.runCode('import os; os.getcwd()', { context: ctx })).text, '/tmp')
  assert.equal((await sbx.runCode('y')).error.name, 'NameError', 'the default context has no y')
  const listed = await sbx.listCodeContexts()
  assert.ok(Array.isArray(listed))
  assert.deepEqual(listed.find((x) => x.id === ctx.id), ctx)
  await sbx.restartCodeContext(ctx)
  assert.equal((await sbx.runCode('y', { context: ctx })).error.name, 'NameError', 'restarted: y is gone')
  await sbx.removeCodeContext(ctx.id)
  assert.equal((await sbx.listCodeContexts()).find((x) => x.id === ctx.id), undefined)
  await assert.rejects(sbx.runCode('1', { context: ctx, requestTimeoutMs: 3000 }), NotFoundError)
  await assert.rejects(sbx.removeCodeContext(ctx), NotFoundError)
  await assert.rejects(sbx.restartCodeContext('cx-none'), NotFoundError)
  await assert.rejects(sbx.createCodeContext({ language: 'cobol' }), SandboxError, 'only python and r')
})

test('a cell past timeoutMs is a TimeoutError; other contexts answer meanwhile', async () => {
  const sbx = await box()
  const ctx = await sbx.createCodeContext()
  const t0 = Date.now()
  await assert.rejects(sbx.runCode('import time; time.sleep(20)', { context: ctx, timeoutMs: 1500 }), TimeoutError)
  assert.ok(Date.now() - t0 < 10_000)
  assert.equal((await sbx.runCode('2 * 21')).text, '42')
  await sbx.removeCodeContext(ctx)
})

test('a cell whose client gave up is interrupted, as E2B does: its context answers next', {
  skip: !fresh && 'the template store was built from an older recipe (its server has no interrupt)',
}, async () => {
  const sbx = await box()
  const ctx = await sbx.createCodeContext()
  await sbx.runCode('z = 5', { context: ctx })
  const t0 = Date.now()
  await assert.rejects(sbx.runCode('import time; time.sleep(120)', { context: ctx, timeoutMs: 1000 }), TimeoutError)
  const r = await sbx.runCode('z * 2', { context: ctx, timeoutMs: 30_000 })
  assert.equal(r.text, '10', 'interrupted, not restarted: the state is kept ' + JSON.stringify(r))
  assert.ok(Date.now() - t0 < 15_000, `${Date.now() - t0} ms`)
  await sbx.removeCodeContext(ctx)
})

test("envs of runCode are the cell's alone", {
  skip: !fresh && 'the template store was built from an older recipe (its server takes no env)',
}, async () => {
  const sbx = await box()
  const r = await sbx.runCode('import os; os.environ["CELL_VAR"] + " " + os.environ["HOME"]', {
    envs: { CELL_VAR: 'only-here', HOME: '/elsewhere' },
  })
  assert.equal(r.text, 'only-here /elsewhere')
  const after = await sbx.runCode('os.environ.get("CELL_VAR", "gone") + " " + os.environ["HOME"]')
  assert.equal(after.text, 'gone /home/user', 'as they were before the cell')
  await assert.rejects(sbx.runCode('1', { envs: { 'A=B': 'x' }, requestTimeoutMs: 3000 }), SandboxError)
})

test("a matplotlib figure's result has its chart, as E2B's Chart types it", {
  skip: !fresh && 'the template store was built from an older recipe (its server has no charts)',
}, async () => {
  const sbx = await box()
  let r = await sbx.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [2, 4, 8], label='doubling')\n" +
    "plt.title('growth'); plt.xlabel('day'); plt.show()")
  const res = r.results.find((x) => x.chart)
  assert.ok(res, `formats: ${JSON.stringify(r.results.map((x) => x.formats()))}`)
  assert.ok(res.png, 'beside its PNG') // (2.7.2's formats() lists no chart)
  assert.equal(res.chart.type, 'line', 'ChartType.LINE')
  assert.equal(res.chart.title, 'growth')
  assert.equal(res.chart.x_label, 'day')
  assert.deepEqual(res.chart.elements, [{ label: 'doubling', points: [[1, 2], [2, 4], [3, 8]] }])
  r = await sbx.runCode("plt.bar(['a', 'b'], [5, 3]); plt.show()")
  const bar = r.results.find((x) => x.chart).chart
  assert.equal(bar.type, 'bar', 'ChartType.BAR')
  assert.deepEqual(bar.elements.map((e) => [e.label, e.value]), [['a', 5], ['b', 3]])
})

test("language 'r': its own context, a plot as PNG, an error, the cell's envs", {
  skip: !fresh && 'the template store was built from an older recipe (it has no R)',
}, async () => {
  const sbx = await box()
  assert.equal((await sbx.runCode('v <- 6 * 7; v', { language: 'r' })).text, '[1] 42')
  assert.equal((await sbx.runCode('v', { language: 'r' })).text, '[1] 42', 'state kept')
  const ctx = await sbx.createCodeContext({ language: 'r' })
  assert.equal(ctx.language, 'r')
  assert.equal((await sbx.runCode('exists("v")', { context: ctx })).text, '[1] FALSE')
  const plot = await sbx.runCode('plot(1:3)', { context: ctx })
  assert.ok(plot.results.find((x) => x.png), JSON.stringify(plot.results.map((x) => x.formats())))
  const err = await sbx.runCode('stop("no such thing")', { context: ctx })
  assert.equal(err.error.name, 'ERROR')
  assert.match(err.error.value, /no such thing/)
  const env = await sbx.runCode('Sys.getenv("CELL_VAR")', { language: 'r', envs: { CELL_VAR: 'r-only' } })
  assert.equal(env.text, '[1] "r-only"')
  assert.equal((await sbx.runCode('Sys.getenv("CELL_VAR", "gone")', { language: 'r' })).text, '[1] "gone"')
  await sbx.removeCodeContext(ctx)
})

test('the port-49999 routes need the token, the port and a live sandbox', async () => {
  const sbx = await box()
  const id = sbx.sandboxId
  const hdr = (port, extra = {}) => ({ 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': port, ...extra })
  assert.equal((await raw(sbx, '/execute', hdr('49999'))).status, 401, 'no token')
  assert.equal((await raw(sbx, '/execute', hdr('49999', { 'E2B-Traffic-Access-Token': '0'.repeat(64) }))).status, 401)
  const tok = { 'X-Access-Token': sbx.envdAccessToken }
  assert.equal((await raw(sbx, '/execute', hdr('49983', tok))).status, 404, "envd's port has no /execute")
  assert.equal((await raw(sbx, '/execute', hdr('8080', tok))).status, 501, 'other ports go by host name only')
  assert.equal((await raw(sbx, '/process.Process/List', hdr('49999', tok), '{}')).status, 404, "the code port has no envd")
  const ok = await raw(sbx, '/execute', hdr('49999', tok), '{"code": "6 * 7"}')
  assert.equal(ok.status, 200)
  const lines = ok.body.trim().split('\n').map((l) => JSON.parse(l))
  assert.deepEqual(lines.find((l) => l.type === 'result'), { type: 'result', is_main_result: true, text: '42' })
  assert.equal(lines.at(-1).type, 'end_of_execution')
  // by Host, as with E2B_DOMAIN: the traffic token alone admits it
  const byHost = await raw(sbx, '/execute', { 'E2B-Traffic-Access-Token': sbx.trafficAccessToken },
    '{"code": "1 + 1"}', `49999-${id}.${process.env.CORDON_E2B_DOMAIN}`)
  assert.equal(byHost.status, 200)
  assert.match(byHost.body, /"text":"2"/)
  const bad = await raw(sbx, '/execute', hdr('49999', tok), '{"code": 1}')
  assert.equal(bad.status, 400)
  assert.equal(JSON.parse(bad.body).code, 400)
  const both = await raw(sbx, '/execute', hdr('49999', tok), '{"code": "1", "language": "python", "context_id": "default"}')
  assert.equal(both.status, 400)
})

test('a killed sandbox: runCode is a TimeoutError (502), as on E2B', async () => {
  const sbx = await create()
  assert.equal((await sbx.runCode('1')).text, '1')
  await sbx.kill()
  await assert.rejects(sbx.runCode('1', { requestTimeoutMs: 3000 }), TimeoutError)
  await assert.rejects(sbx.listCodeContexts(), TimeoutError)
})
