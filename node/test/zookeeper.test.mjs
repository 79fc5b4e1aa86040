// The npm package on ZooKeeper: zk:// is only another URL.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { connect } from 'dlock'

import { twoClientsContend } from './contention.mjs'
import { startZooKeeper } from './zookeeper.mjs'

let zk
before(async () => {
  zk = await startZooKeeper()
})
after(() => zk.stop())

test('locks on zk:// exclude, fence with increasing bigints and report status', async () => {
  const { a, b } = await twoClientsContend(zk.url, 'orders/42')

  const held = await a.lock('orders/42').acquire()
  assert.equal(await b.lock('orders/42').tryAcquire(), null)
  const status = await b.status('orders/42')
  assert.equal(status.fencingToken, held.fencingToken)
  await held.release()
  assert.equal((await b.status('orders/42')).owner, null)
  await a.close()
  await b.close()
})

test('an election on zk:// (Curator LeaderSelector layout): campaign, proclaim, observe, resign', async () => {
  const [a, b] = [await connect(zk.url), await connect(zk.url)]
  const changes = b.election('zk/e').observe()[Symbol.asyncIterator]()
  const next = async () => (await changes.next()).value
  assert.equal(await next(), null)
  const lead = await a.election('zk/e').campaign('a')
  assert.deepEqual(await next(), { term: lead.term, value: 'a' })
  await lead.proclaim('a2')
  assert.deepEqual(await next(), { term: lead.term, value: 'a2' })
  assert.deepEqual(await b.election('zk/e').leader(), { term: lead.term, value: 'a2' })
  await lead.resign()
  assert.equal(await next(), null)
  await changes.return()
  await a.close()
  await b.close()
})
