// Lock statistics against a real redis-server: after the scripted sequence of the Rust crate's
// and Python's tests the counts are exact, and registerMetrics gives prom-client's registry
// well-formed Prometheus text with the same numbers.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'

import { connect, registerMetrics, Engine, LOST_REASONS } from 'dlock'
import { Registry } from 'prom-client'
import { startRedis } from './redis.mjs'

let redis
before(async () => {
  redis = await startRedis()
})
after(() => redis.stop())

const NAME = 'stats/a'
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

/** Until the server shows `n` waiters: an event, polled; no verdict rests on its timing. */
async function waiters(client, n) {
  while ((await client.status(NAME)).waiters.length !== n) await sleep(5)
}

/** Acquire, reenter, busy, time out, cancel, hand off, lose to max-hold. */
async function script(client) {
  const outer = await client.lock(NAME, { owner: 7, leaseMs: 60_000 }).acquire()
  const inner = await client.lock(NAME, { owner: 7, leaseMs: 60_000 }).acquire()
  assert.equal(await client.lock(NAME).tryAcquire(), null)
  await assert.rejects(client.lock(NAME, { waitMs: 50 }).acquire(), { code: 'DLOCK_TIMEOUT' })
  // Its DEQUEUE may still be on its way: the waiter counted next must be the one cancelled.
  await waiters(client, 0)
  const controller = new AbortController()
  const cancelled = client.lock(NAME).acquire({ signal: controller.signal })
  await waiters(client, 1)
  controller.abort()
  await assert.rejects(cancelled, { name: 'AbortError' })
  await waiters(client, 0)
  const handed = client.lock(NAME, { leaseMs: 60_000 }).acquire()
  await waiters(client, 1)
  await inner.release()
  await outer.release()
  await (await handed).release()
  const short = await client.lock(NAME, { maxHoldMs: 100 }).acquire()
  assert.equal(await short.lost, 'max-hold')
}

test('the counts after a scripted sequence are exact', async () => {
  const client = await connect(redis.url, { waiterLeaseMs: 60_000 })
  await script(client)
  const [s, ...rest] = await client.stats()
  assert.deepEqual(rest, [])
  assert.deepEqual([s.name, s.kind, s.permits], [NAME, 'lock', undefined])
  const counts = [s.acquired, s.handedOff, s.reentered, s.released, s.busy, s.timedOut, s.cancelled, s.failed]
  assert.deepEqual(counts, [3, 1, 1, 2, 1, 1, 1, 0])
  assert.deepEqual(Object.keys(s.lost).sort(), [...LOST_REASONS].sort())
  assert.deepEqual(Object.entries(s.lost).filter(([, n]) => n), [['max-hold', 1]])
  // Nothing is renewed: every lease is a minute, and so is the waiter lease, which the handed
  // lock is valid for until its renewal, a third of it after the waiter queued.
  assert.deepEqual([s.renewals, s.renewalsFailed, s.held, s.waiting], [0, 0, 0, 0])
  assert.deepEqual([s.wait.count, s.hold.count], [3, 3])
  assert.deepEqual(s.wait.buckets.at(-1), ['+Inf', 3])
  assert.ok(s.hold.maxSeconds >= 0.1 && s.hold.sumSeconds >= s.hold.maxSeconds)
  await client.close()
})

test('registerMetrics gives prom-client well-formed text with the counts', async () => {
  const client = await connect(redis.url)
  const done = await client.lock(NAME, { leaseMs: 60_000 }).acquire()
  await done.release()
  const held = await client.lock(NAME, { leaseMs: 60_000 }).acquire()
  const registry = new Registry()
  registerMetrics(client, registry)
  assert.throws(() => registerMetrics(client, {}), { code: 'DLOCK_INVALID_ARGUMENT' })
  const text = await registry.metrics()
  const samples = new Map()
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('# HELP ') || line.startsWith('# TYPE ')) continue
    const m = /^([a-z_]+)\{([^}]*)\} (\S+)$/.exec(line)
    assert.ok(m, `a sample line: ${JSON.stringify(line)}`)
    const labels = m[2].split(',').map((l) => /^([a-z]+)="([^"]*)"$/.exec(l))
    assert.ok(labels.every(Boolean), `labels of ${line}`)
    const key = labels.map(([, k, v]) => `${k}=${v}`).sort().join(',')
    samples.set(`${m[1]}{${key}}`, Number(m[3]))
  }
  const lock = `kind=lock,name=${NAME}`
  assert.equal(samples.get(`dlock_acquired_total{${lock}}`), 2)
  assert.equal(samples.get(`dlock_released_total{${lock}}`), 1)
  assert.equal(samples.get(`dlock_held{${lock}}`), 1)
  assert.equal(samples.get(`dlock_lost_total{${lock},reason=max-hold}`), 0)
  assert.equal(samples.get(`dlock_wait_seconds_count{${lock}}`), 2)
  assert.equal(samples.get(`dlock_wait_seconds_bucket{kind=lock,le=+Inf,name=${NAME}}`), 2)
  assert.equal(samples.get(`dlock_hold_seconds_count{${lock}}`), 1)
  assert.equal(text.match(/# TYPE dlock_wait_seconds histogram/g).length, 1)
  await held.release()
  await client.close()
})

test('the engine gives its counts', () => {
  const engine = new Engine({ client_id: '0'.repeat(31) + '1' }, 0)
  assert.deepEqual(engine.stats(), { locks: [] })
})
