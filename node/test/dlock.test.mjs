// The npm package against a real redis-server, as installed from the packed tarball.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { fork, spawnSync } from 'node:child_process'
import { writeFileSync, readFileSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import { inspect } from 'node:util'

import { connect } from 'dlock'
import { startRedis, freePort } from './redis.mjs'

const here = dirname(fileURLToPath(import.meta.url))
let redis
before(async () => {
  redis = await startRedis()
})
after(() => redis.stop())

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function until(what, f) {
  const deadline = Date.now() + 5000
  while (!(await f())) {
    assert.ok(Date.now() < deadline, `timed out waiting until ${what}`)
    await sleep(5)
  }
}

test('acquire, release and increasing bigint fencing tokens', async () => {
  const client = await connect(redis.url)
  const tokens = []
  for (let i = 0; i < 3; i++) {
    const held = await client.lock('orders/42', { leaseMs: 10_000, waitMs: 5_000 }).acquire()
    assert.equal(typeof held.fencingToken, 'bigint')
    tokens.push(held.fencingToken)
    await held.release()
  }
  assert.ok(tokens[0] < tokens[1] && tokens[1] < tokens[2], `tokens grow: ${tokens}`)
  assert.equal((await client.status('orders/42')).owner, null)
  await client.close()
})

test('tryAcquire, wait timeout, and the queue is left afterwards', async () => {
  const a = await connect(redis.url)
  const b = await connect(redis.url)
  const held = await a.lock('t').acquire()
  assert.equal(await b.lock('t').tryAcquire(), null)
  await assert.rejects(b.lock('t', { waitMs: 200 }).acquire(), { code: 'DLOCK_TIMEOUT' })
  await sleep(50)
  assert.deepEqual((await a.status('t')).waiters, [])
  await held.release()
  await assert.rejects(held.release(), { code: 'DLOCK_NOT_HELD' })
  await a.close()
  await b.close()
})

test('an AbortSignal cancels a waiting acquire and removes it from the queue', async () => {
  const client = await connect(redis.url)
  const held = await client.lock('abort').acquire()
  const controller = new AbortController()
  const waiting = client.lock('abort').acquire({ signal: controller.signal })
  await until('one waiter queues', async () => (await client.status('abort')).waiters.length === 1)
  controller.abort()
  await assert.rejects(waiting, { name: 'AbortError' })
  await until('the waiter left', async () => (await client.status('abort')).waiters.length === 0)
  await assert.rejects(client.lock('abort').acquire({ signal: AbortSignal.abort() }), { name: 'AbortError' })
  await held.release()
  assert.equal((await client.status('abort')).owner, null)
  await client.close()
})

test('held.lost resolves when the key is deleted, and release then rejects with DLOCK_LOST', async () => {
  const client = await connect(redis.url)
  const held = await client.lock('fragile', { leaseMs: 600 }).acquire()
  redis.cli('DEL', 'dlock:{fragile}:lock')
  assert.equal(await held.lost, 'not-owner')
  assert.ok(held.isLost)
  assert.match(inspect(held), /lost \(not-owner\)/)
  await assert.rejects(held.release(), { code: 'DLOCK_LOST' })
  await client.close()
})

test('reentrancy with an explicit owner, extend and maxHoldMs', async () => {
  const client = await connect(redis.url)
  const outer = await client.lock('re', { owner: 7 }).acquire()
  const inner = await client.lock('re', { owner: 7 }).acquire()
  assert.equal(inner.fencingToken, outer.fencingToken)
  assert.equal((await client.status('re')).count, 2)
  assert.equal(await client.lock('re').tryAcquire(), null)
  await inner.release()
  await outer.extend(60_000)
  assert.ok((await client.status('re')).ttlMs > 50_000)
  await outer.release()
  const bounded = await client.lock('bounded', { leaseMs: 200, maxHoldMs: 500 }).acquire()
  assert.equal(await bounded.lost, 'max-hold')
  await client.close()
})

test('bad input rejects with DLOCK_INVALID_ARGUMENT before anything is sent', async () => {
  const client = await connect(redis.url)
  const keys = redis.cli('DBSIZE')
  const bad = [
    ['', {}],
    ['n'.repeat(1025), {}],
    ['ok', { leaseMs: 0 }],
    ['ok', { leaseMs: -1 }],
    ['ok', { leaseMs: NaN }],
    ['ok', { leaseMs: Infinity }],
    ['ok', { leaseMs: 5 }],
    ['ok', { waitMs: -1 }],
    ['ok', { maxHoldMs: 0 }],
  ]
  for (const [name, options] of bad) {
    await assert.rejects(client.lock(name, options).acquire(), { code: 'DLOCK_INVALID_ARGUMENT' }, `${name.length} ${JSON.stringify(options)}`)
  }
  assert.throws(() => client.lock(42), { code: 'DLOCK_INVALID_ARGUMENT' })
  assert.equal(redis.cli('DBSIZE'), keys, 'bad input reached Redis')
  for (const url of ['', 'redis://', 'http://x', 'memory://a b', 'zk://h', 'zk://h:1?ttl=2']) {
    await assert.rejects(connect(url), { code: 'DLOCK_INVALID_ARGUMENT' }, url)
  }
  await assert.rejects(connect(`redis://127.0.0.1:${await freePort()}`), { code: 'DLOCK_BACKEND' })
  await client.close()
  await assert.rejects(client.lock('x').acquire(), { code: 'DLOCK_CLOSED' })
})

test('waiting never blocks the event loop', async () => {
  const client = await connect(redis.url)
  const held = await client.lock('loop').acquire()
  let ticks = 0
  const timer = setInterval(() => ticks++, 10)
  await assert.rejects(client.lock('loop', { waitMs: 500 }).acquire(), { code: 'DLOCK_TIMEOUT' })
  clearInterval(timer)
  assert.ok(ticks >= 20, `the timer fired only ${ticks} times during a 500 ms wait`)
  await held.release()
  await client.close()
})

test('a process exits promptly after close, and an unhandled lost lock does not crash it', () => {
  const script = (body) =>
    spawnSync(process.execPath, ['--input-type=module', '-e', `import { connect } from 'dlock'\n${body}`], {
      cwd: here,
      timeout: 10_000,
      encoding: 'utf8',
    })
  const started = Date.now()
  const closed = script(`
    const c = await connect('${redis.url}')
    const h = await c.lock('exit').acquire()
    await h.release()
    await c.close()`)
  assert.equal(closed.status, 0, closed.stderr)
  assert.ok(Date.now() - started < 5000, 'the process lingered')
  const lost = script(`
    const c = await connect('${redis.url}')
    const h = await c.lock('unhandled', { leaseMs: 300 }).acquire()
    h.lost // nobody waits for it
    const { execFileSync } = await import('node:child_process')
    execFileSync('redis-cli', ['-p', '${redis.port}', 'DEL', 'dlock:{unhandled}:lock'])
    await new Promise((r) => setTimeout(r, 800))
    console.log(h.lostReason)
    await c.close()`)
  assert.equal(lost.status, 0, lost.stderr)
  assert.equal(lost.stdout.trim(), 'not-owner')
  // A call under way keeps the process alive, with nothing else to wait for.
  const waiting = script(`
    const c = await connect('${redis.url}')
    await c.lock('alive').acquire()
    console.log(await c.lock('alive', { waitMs: 300 }).acquire().catch((e) => e.code))
    await c.close()`)
  assert.equal(waiting.status, 0, waiting.stderr)
  assert.equal(waiting.stdout.trim(), 'DLOCK_TIMEOUT')
})

test('child_process workers keep a fenced counter exact', async () => {
  const path = join(mkdtempSync(join(tmpdir(), 'dlock-counter-')), 'counter.json')
  writeFileSync(path, JSON.stringify({ value: 0, token: 0 }))
  const workers = Array.from({ length: 4 }, () => fork(join(here, 'worker.mjs'), [redis.url, path, '20']))
  const codes = await Promise.all(workers.map((w) => new Promise((r) => w.once('exit', r))))
  assert.deepEqual(codes, [0, 0, 0, 0])
  assert.equal(JSON.parse(readFileSync(path, 'utf8')).value, 80, 'every increment counted, none lost')
})

test('memory:// needs no server', async () => {
  const a = await connect('memory://node-tests')
  const b = await connect('memory://node-tests')
  const held = await a.lock('m').acquire()
  assert.equal(await b.lock('m').tryAcquire(), null)
  const waiting = b.lock('m').acquire()
  await sleep(20)
  await held.release()
  assert.ok((await waiting).fencingToken > held.fencingToken)
  assert.match(inspect(a), /^Client <memory:\/\/node-tests id=[0-9a-f]{32}>$/)
})

test('fencedWrite refuses the write of a holder whose tenure ended', async () => {
  const old = await connect(redis.url)
  const fresh = await connect(redis.url)
  const stale = await old.lock('stock/42', { maxHoldMs: 150 }).acquire()
  assert.equal(await old.fencedWrite('stock:42', stale.fencingToken, '10'), true)
  const held = await fresh.lock('stock/42').acquire({ waitMs: 5000 })
  assert.ok(held.fencingToken > stale.fencingToken)
  assert.equal(await fresh.fencedWrite('stock:42', held.fencingToken, '9'), true)
  assert.equal(await old.fencedWrite('stock:42', stale.fencingToken, '11'), false)
  assert.equal(redis.cli('HGET', 'stock:42', 'value'), '9')
  await assert.rejects(old.fencedWrite('stock:42', 0, 'x'), { code: 'DLOCK_INVALID_ARGUMENT' })
  await held.release()
  await old.close()
  await fresh.close()
})

test('lockDelayMs keeps the lock on the server past the lease; a release frees it at once', async () => {
  const client = await connect(redis.url, { lockDelayMs: 10_000 })
  const held = await client.lock('delayed', { leaseMs: 1000 }).acquire()
  // The server keeps the lock lease + delay (the delay 1% longer, for clock rates): longer
  // than the lease alone could last.
  const { ttlMs } = await client.status('delayed')
  assert.ok(ttlMs > 1000 && ttlMs <= 11_100, `ttl ${ttlMs}`)
  await held.release()
  assert.equal((await client.status('delayed')).owner, null)
  await assert.rejects(connect(redis.url, { lockDelayMs: -1 }), { code: 'DLOCK_INVALID_ARGUMENT' })
  await client.close()
})
