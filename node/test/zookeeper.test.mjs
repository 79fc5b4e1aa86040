// The npm package on ZooKeeper: zk:// is only another URL.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'

import { twoClientsContend } from './contention.mjs'
import { aLeaderIsObserved } from './observed.mjs'
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
  await aLeaderIsObserved(zk.url, 'zk/e')
})
