// The npm package on Redlock: three independent redis-servers behind one redlock:// URL.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'

import { connect } from 'dlock'
import { startRedis } from './redis.mjs'

let nodes
before(async () => {
  nodes = await Promise.all([startRedis(), startRedis(), startRedis()])
})
after(() => nodes.forEach((n) => n.stop()))

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const url = () => `redlock://${nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`

test('Redlock excludes, renews on a majority and fences', async () => {
  const a = await connect(url())
  const b = await connect(url())
  // A lease long enough that a loaded machine's stall cannot let a node's key run out.
  const held = await a.lock('job', { leaseMs: 2000 }).acquire()
  assert.equal(await b.lock('job').tryAcquire(), null)
  const status = await a.status('job')
  assert.equal(status.fencingToken, held.fencingToken)
  // One node's keys vanish behind the holder's back: the other two keep renewing it past
  // its lease.
  nodes[0].cli('FLUSHALL')
  await sleep(2500)
  assert.equal(held.lostReason, null)
  assert.equal(await b.lock('job').tryAcquire(), null)
  await held.release()
  const next = await b.lock('job', { waitMs: 5000 }).acquire()
  assert.ok(next.fencingToken > held.fencingToken)
  await next.release()
  await assert.rejects(a.fencedWrite('stock', next.fencingToken, '7'))
  await a.close()
  await b.close()
})
