// Leader election from Node (docs/PROTOCOL.md §20) against a real redis-server and Redis
// Cluster: candidates lead one at a time with growing terms, observers hear every change
// (`for await`), an AbortSignal ends a campaign, and what cannot be done is refused. Verdicts
// wait for events, not for timers.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'

import { connect } from 'dlock'
import { startRedis, startRedisCluster } from './redis.mjs'

let server
before(async () => {
  server = await startRedis()
})
after(() => server.stop())

/** The observer's changes, read one at a time. */
function reader(observer) {
  const it = observer[Symbol.asyncIterator]()
  return async () => {
    const { value, done } = await it.next()
    assert.equal(done, false)
    return value
  }
}

test('candidates take turns and an observer hears each change', async () => {
  const [a, b, watcher] = await Promise.all([connect(server.url), connect(server.url), connect(server.url)])
  const observer = watcher.election('scheduler').observe()
  const next = reader(observer)
  assert.equal(await next(), null, 'nobody leads yet')
  const first = await a.election('scheduler').campaign('a:1')
  assert.deepEqual(await next(), { term: first.term, value: 'a:1' })
  assert.deepEqual(await b.election('scheduler').leader(), { term: first.term, value: 'a:1' })

  const second = b.election('scheduler').campaign('b:2')
  while ((await watcher.status('scheduler')).waiters.length !== 1) await new Promise((r) => setTimeout(r, 10))
  await first.proclaim('a:1 (draining)')
  assert.deepEqual(await next(), { term: first.term, value: 'a:1 (draining)' })
  await first.resign()
  const lead = await second
  assert.ok(lead.term > first.term, 'terms grow')
  let seen = await next()
  if (seen === null) seen = await next() // the hand-off may show the free lock first
  assert.deepEqual(seen, { term: lead.term, value: 'b:2' })
  await lead.resign()
  assert.equal(await next(), null, 'free once the last resigns')
  await observer.return()
  for (const c of [a, b, watcher]) await c.close()
})

test('for await observes until the loop is left; an aborted campaign leaves the queue', async () => {
  const client = await connect(server.url)
  const election = client.election('reports', { leaseMs: 5_000 })
  const lead = await election.campaign('one')
  assert.ok(lead.validForMs > 0 && lead.validForMs <= 5_000, 'the local deadline is within the lease')
  const seen = []
  for await (const leader of election.observe()) {
    seen.push(leader)
    if (leader !== null && leader.value === 'two') break
    if (seen.length === 1) await lead.proclaim('two')
  }
  assert.deepEqual(seen, [
    { term: lead.term, value: 'one' },
    { term: lead.term, value: 'two' },
  ])
  const controller = new AbortController()
  const waiting = election.campaign('three', { signal: controller.signal })
  while ((await client.status('reports')).waiters.length !== 1) await new Promise((r) => setTimeout(r, 10))
  controller.abort()
  await assert.rejects(waiting, { name: 'AbortError' })
  // The campaign leaves the queue (its DEQUEUE goes out after the rejection).
  while ((await client.status('reports')).waiters.length !== 0) await new Promise((r) => setTimeout(r, 10))
  await assert.rejects(election.campaign('four', { waitMs: 50 }), { code: 'DLOCK_TIMEOUT' })
  assert.equal(lead.isLost, false)
  await lead[Symbol.asyncDispose]() // what `await using` calls at the end of its block
  assert.equal(await election.leader(), null, 'disposing resigned')
  await client.close()
})

test('bad input is refused before anything is sent', async () => {
  const client = await connect(server.url)
  await assert.rejects(client.election('e').campaign('v'.repeat(4097)), { code: 'DLOCK_INVALID_ARGUMENT' })
  await assert.rejects(client.election('').leader(), { code: 'DLOCK_INVALID_ARGUMENT' })
  assert.throws(() => client.election(42), { code: 'DLOCK_INVALID_ARGUMENT' })
  await assert.rejects(client.election('e').campaign(7), { code: 'DLOCK_INVALID_ARGUMENT' })
  assert.equal((await client.status('e')).owner, null)
  await client.close()
})

test('on a Redis Cluster', async () => {
  const cluster = await startRedisCluster()
  try {
    const client = await connect(cluster.url)
    const observer = client.election('cluster/e').observe()
    const next = reader(observer)
    assert.equal(await next(), null)
    const lead = await client.election('cluster/e').campaign('c')
    assert.deepEqual(await next(), { term: lead.term, value: 'c' })
    await lead.resign()
    assert.equal(await next(), null)
    await observer.return()
    await client.close()
  } finally {
    cluster.stop()
  }
})
