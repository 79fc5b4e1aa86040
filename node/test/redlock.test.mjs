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
// When a node's copy of the lock runs out (ms on its clock; -2: no such key).
const expiry = (node) => Number(node.cli('PEXPIRETIME', 'dlock:{job}:lock'))

test('Redlock excludes, renews on a majority and fences', async () => {
  const a = await connect(url())
  const b = await connect(url())
  const held = await a.lock('job', { leaseMs: 3000 }).acquire()
  // An acquire returns once a majority grants it; the third node's grant may still be on its
  // way. Only with all three does losing one leave the two that renewals need: wait for it,
  // before a contender's try could take the third node in between.
  const stuck = Date.now() + 10000
  while (!nodes.every((n) => expiry(n) > 0)) {
    assert.ok(Date.now() < stuck, 'a did not get the lock on every node')
    await sleep(10)
  }
  assert.equal(await b.lock('job').tryAcquire(), null)
  const status = await a.status('job')
  assert.equal(status.fencingToken, held.fencingToken)
  // One node's keys vanish behind the holder's back: the other two renew it, which moves
  // their copies' expiry on (waited for as it happens, not for a time).
  nodes[0].cli('FLUSHALL')
  const first = [expiry(nodes[1]), expiry(nodes[2])]
  assert.ok(first.every((t) => t > 0), `${first}`)
  const renewed = () => expiry(nodes[1]) > first[0] && expiry(nodes[2]) > first[1]
  while (held.lostReason === null && !renewed()) await sleep(20)
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
