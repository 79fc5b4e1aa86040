// The npm package on ZooKeeper: zk:// is only another URL.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'

import { connect } from 'dlock'
import { startZooKeeper } from './zookeeper.mjs'

let zk
before(async () => {
  zk = await startZooKeeper()
})
after(() => zk.stop())

test('locks on zk:// exclude, fence with increasing bigints and report status', async () => {
  const a = await connect(zk.url)
  const b = await connect(zk.url)
  const tokens = []
  let inside = false
  const worker = async (client) => {
    for (let i = 0; i < 5; i++) {
      const held = await client.lock('orders/42').acquire({ waitMs: 30_000 })
      assert.equal(inside, false, 'two holders at once')
      inside = true
      tokens.push(held.fencingToken)
      await new Promise((r) => setTimeout(r, 1))
      inside = false
      await held.release()
    }
  }
  await Promise.all([worker(a), worker(b), worker(a), worker(b)])
  assert.equal(tokens.length, 20)
  assert.ok(tokens.every((t, i) => i === 0 || t > tokens[i - 1]), `tokens: ${tokens}`)

  const held = await a.lock('orders/42').acquire()
  assert.equal(await b.lock('orders/42').tryAcquire(), null)
  const status = await b.status('orders/42')
  assert.equal(status.fencingToken, held.fencingToken)
  await held.release()
  assert.equal((await b.status('orders/42')).owner, null)
  await a.close()
  await b.close()
})
