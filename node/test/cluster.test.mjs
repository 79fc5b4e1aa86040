// The npm package on a real three-master Redis Cluster: the same API with a redis-cluster:// URL.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'

import { connect } from 'dlock'
import { startRedisCluster } from './redis.mjs'

let cluster
before(async () => {
  cluster = await startRedisCluster()
})
after(() => cluster.stop())

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

test('locks spread over the masters exclude, renew and hand off', async () => {
  const a = await connect(cluster.url)
  const b = await connect(cluster.url)
  const names = Array.from({ length: 12 }, (_, i) => `job/${i}`)
  const held = []
  for (const name of names) held.push(await a.lock(name, { leaseMs: 300 }).acquire())
  for (const name of names) assert.equal(await b.lock(name).tryAcquire(), null)
  await sleep(1000) // several leases: each lock is renewed on its own node
  assert.ok(held.every((h) => h.lostReason === null))
  const waiting = b.lock(names[0], { waitMs: 5000 }).acquire()
  await sleep(50)
  await held[0].release()
  const next = await waiting
  assert.ok(next.fencingToken > held[0].fencingToken)
  assert.equal(await a.fencedWrite('stock/42', next.fencingToken, '7'), true)
  assert.equal(await a.fencedWrite('stock/42', held[0].fencingToken, '9'), false)
  await next.release()
  for (const h of held.slice(1)) await h.release()
  await a.close()
  await b.close()
})
