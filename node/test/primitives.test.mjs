// Beyond the plain fair mutex: multi-locks (several names as one, all or none), fair: false, semaphores and read-write locks.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'

import { connect } from 'dlock'
import { startRedis } from './redis.mjs'
import { startZooKeeper } from './zookeeper.mjs'

const servers = {}
before(async () => {
  servers.redis = await startRedis()
  servers.zookeeper = await startZooKeeper()
})
after(() => {
  servers.redis.stop()
  servers.zookeeper.stop()
})

async function eventuallyFree(client, name) {
  const deadline = Date.now() + 5000
  while ((await client.status(name)).owner !== null) {
    assert.ok(Date.now() < deadline, `${name} was not given back`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

for (const backend of ['redis', 'zookeeper']) {
  test(`a multi-lock on ${backend} is all or none, in canonical order`, async () => {
    const url = servers[backend].url
    const a = await connect(url)
    const b = await connect(url)
    const single = await b.lock('set/2').acquire()
    assert.equal(await a.multiLock(['set/3', 'set/1', 'set/2']).tryAcquire(), null)
    await assert.rejects(a.multiLock(['set/3', 'set/1', 'set/2'], { waitMs: 300 }).acquire(), { code: 'DLOCK_TIMEOUT' })
    await eventuallyFree(b, 'set/1')
    const waiting = a.multiLock(['set/3', 'set/1', 'set/2', 'set/1']).acquire()
    await single.release()
    const held = await waiting
    assert.deepEqual(Object.keys(held.fencingTokens), ['set/1', 'set/2', 'set/3'])
    for (const [name, token] of Object.entries(held.fencingTokens)) {
      assert.equal(typeof token, 'bigint')
      assert.equal((await b.status(name)).fencingToken, token)
    }
    assert.equal(await b.lock('set/3').tryAcquire(), null)
    await held.extend(10_000)
    await held.release()
    for (const name of ['set/1', 'set/2', 'set/3']) assert.equal((await b.status(name)).owner, null)
    await assert.rejects(a.multiLock([]).acquire(), { code: 'DLOCK_INVALID_ARGUMENT' })
    const controller = new AbortController()
    const blocker = await b.lock('set/9').acquire()
    const aborted = a.multiLock(['set/8', 'set/9']).acquire({ signal: controller.signal })
    setTimeout(() => controller.abort(), 100)
    await assert.rejects(aborted)
    await eventuallyFree(b, 'set/8')
    await blocker.release()
    await a.close()
    await b.close()
  })
}

test('fair: false frees the lock on release and wakes the waiter; ZooKeeper refuses it', async () => {
  // The waiter refreshes its place only every 10 s and the holder's lease lasts 30 s: only
  // the release's wake-up can bring it in within the 5 s below.
  const a = await connect(servers.redis.url)
  const b = await connect(servers.redis.url, { waiterLeaseMs: 30_000 })
  const held = await a.lock('nf', { fair: false }).acquire()
  const waiting = b.lock('nf', { waitMs: 10_000 }).acquire()
  await new Promise((r) => setTimeout(r, 200))
  const released = Date.now()
  await held.release()
  const next = await waiting
  assert.ok(Date.now() - released < 5000, 'woken by the release, not by a refresh 10 s later')
  assert.ok(next.fencingToken > held.fencingToken)
  await next.release()
  assert.throws(() => a.lock('nf', { fair: 'no' }), { code: 'DLOCK_INVALID_ARGUMENT' })
  const zk = await connect(servers.zookeeper.url)
  await assert.rejects(zk.lock('nf', { fair: false }).acquire(), { code: 'DLOCK_INVALID_ARGUMENT' })
  await Promise.all([a.close(), b.close(), zk.close()])
})

test('a semaphore lets in at most its permits, each acquire a permit of its own', async () => {
  const url = servers.redis.url
  const clients = await Promise.all([connect(url), connect(url), connect(url)])
  let inside = 0
  let most = 0
  const tokens = new Set()
  const worker = async (i) => {
    const semaphore = clients[i % 3].semaphore('pool', { permits: 3, leaseMs: 5000 })
    for (let round = 0; round < 4; round++) {
      const held = await semaphore.acquire()
      inside += 1
      most = Math.max(most, inside)
      tokens.add(held.fencingToken)
      await new Promise((r) => setTimeout(r, 30))
      inside -= 1
      await held.release()
    }
  }
  await Promise.all([...Array(8).keys()].map(worker))
  assert.equal(most, 3, 'never more than 3 holders, and all 3 permits in use at once')
  assert.equal(tokens.size, 32, 'every permit has a token of its own')

  const [a, b] = clients
  const first = await a.semaphore('two', { permits: 2 }).acquire()
  const second = await a.semaphore('two', { permits: 2 }).acquire()
  assert.notEqual(first.fencingToken, second.fencingToken)
  assert.equal(await b.semaphore('two', { permits: 2 }).tryAcquire(), null)
  await assert.rejects(b.semaphore('two', { permits: 3 }).tryAcquire(), { code: 'DLOCK_INVALID_ARGUMENT', message: /2 permits/ })
  await assert.rejects(b.semaphore('two', { permits: 0 }).tryAcquire(), { code: 'DLOCK_INVALID_ARGUMENT' })
  for (const bad of [-1, 1.5, '2', undefined, 2 ** 40]) {
    assert.throws(() => b.semaphore('two', { permits: bad }), { code: 'DLOCK_INVALID_ARGUMENT' })
  }
  const lock = await b.lock('two').tryAcquire()
  assert.ok(lock, 'the lock of the same name is another thing')
  await lock.release()
  await first.release()
  const third = await b.semaphore('two', { permits: 2 }).tryAcquire()
  assert.ok(third && third.fencingToken > second.fencingToken)
  await Promise.all([second.release(), third.release()])
})

test('a ZooKeeper semaphore hands a permit to its waiter when any permit goes', async () => {
  const a = await connect(servers.zookeeper.url)
  const b = await connect(servers.zookeeper.url)
  const first = await a.semaphore('pool', { permits: 2 }).acquire()
  const second = await a.semaphore('pool', { permits: 2 }).acquire()
  assert.equal(await b.semaphore('pool', { permits: 2 }).tryAcquire(), null)
  const waiting = b.semaphore('pool', { permits: 2, waitMs: 10_000 }).acquire()
  await new Promise((r) => setTimeout(r, 200))
  await first.release()
  const third = await waiting
  assert.ok(third.fencingToken > second.fencingToken)
  await Promise.all([second.release(), third.release()])
})

test('a read-write lock lets readers share and a writer in alone, with downgrade and writer preference', async () => {
  const url = servers.redis.url
  const clients = await Promise.all([connect(url), connect(url), connect(url)])
  let readers = 0
  let writing = false
  let mostReaders = 0
  let counter = 0
  const problems = []
  const worker = async (i) => {
    const doc = clients[i % 3].rwLock('doc')
    for (let round = 0; round < 4; round++) {
      if (i % 3 === 0) {
        const held = await doc.write({ leaseMs: 5000 }).acquire()
        if (writing || readers) problems.push(`writer ${i} not alone`)
        writing = true
        const seen = counter
        await new Promise((r) => setTimeout(r, 5))
        counter = seen + 1
        writing = false
        await held.release()
      } else {
        const held = await doc.read({ leaseMs: 5000 }).acquire()
        if (writing) problems.push(`reader ${i} beside the writer`)
        readers += 1
        mostReaders = Math.max(mostReaders, readers)
        const seen = counter
        await new Promise((r) => setTimeout(r, 20))
        if (counter !== seen) problems.push(`written while reader ${i} read`)
        readers -= 1
        await held.release()
      }
    }
  }
  await Promise.all([...Array(9).keys()].map(worker))
  assert.deepEqual(problems, [])
  assert.equal(counter, 12)
  assert.ok(mostReaders > 1, 'readers never shared the lock')

  const [a, b] = clients
  const doc = a.rwLock('rules')
  const read = await doc.read().acquire()
  await assert.rejects(doc.write().tryAcquire(), { code: 'DLOCK_INVALID_ARGUMENT', message: /upgrade/ })
  await read.release()
  const write = await doc.write().acquire()
  const downgraded = await doc.read().acquire()
  assert.ok(downgraded.fencingToken > write.fencingToken)
  assert.equal(await b.rwLock('rules').read().tryAcquire(), null)
  await write.release()
  const other = await b.rwLock('rules').read().tryAcquire()
  assert.ok(other, 'readers share once the write hold is gone')
  const writer = b.rwLock('rules').write({ waitMs: 10_000 }).acquire()
  await new Promise((r) => setTimeout(r, 500))
  assert.equal(await a.rwLock('rules').read().tryAcquire(), null, 'no reader passes the waiting writer')
  await Promise.all([downgraded.release(), other.release()])
  const last = await writer
  assert.ok(last.fencingToken > downgraded.fencingToken)
  await last.release()
  assert.throws(() => a.rwLock('x', { owner: 1.5 }), { code: 'DLOCK_INVALID_ARGUMENT' })
})

test('a ZooKeeper read-write lock lets readers share and holds a writer off', async () => {
  const a = await connect(servers.zookeeper.url)
  const b = await connect(servers.zookeeper.url)
  const read = await a.rwLock('doc').read().acquire()
  const other = await b.rwLock('doc').read().acquire()
  assert.equal(await b.rwLock('doc').write().tryAcquire(), null)
  const writer = b.rwLock('doc').write({ waitMs: 10_000 }).acquire()
  await Promise.all([read.release(), other.release()])
  const write = await writer
  assert.ok(write.fencingToken > other.fencingToken)
  await write.release()
})
