// The host surface as a newcomer meets it: secrets never printed, error codes, lost reasons,
// and withLock.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { inspect } from 'node:util'

import { connect, ERROR_CODES, LOST_REASONS, MultiLock, Lock } from 'dlock'
import { startRedis, freePort } from './redis.mjs'

const PASSWORD = 's3cret-Pw'
let redis
before(async () => {
  redis = await startRedis(['--user', 'alice', 'on', `>${PASSWORD}`, '~*', '&*', '+@all', '--user', 'default', 'off'])
})
after(() => redis.stop())

/** Everything Node would print of an error. */
function shown(err) {
  return [String(err), err.message, err.stack, inspect(err)].join('\n')
}

test('no password in any error, inspect output or console line', async () => {
  const closed = await freePort()
  const failing = [
    `redis://alice:${PASSWORD}@`,
    `redis://alice:${PASSWORD}@127.0.0.1:99999`,
    `redis://alice:${PASSWORD}@127.0.0.1:${closed}`,
    `redis://alice:wrong${PASSWORD}@127.0.0.1:${redis.port}`,
    `redlock://alice:${PASSWORD}@127.0.0.1:${closed},127.0.0.1:${closed}`,
    `redis-cluster://alice:${PASSWORD}@127.0.0.1:${closed}`,
    `zk://alice:${PASSWORD}@127.0.0.1`,
    `nope://alice:${PASSWORD}@127.0.0.1:${redis.port}`,
    `alice:${PASSWORD}@127.0.0.1:${redis.port}`,
  ]
  const seen = []
  const printed = []
  const original = { log: console.log, warn: console.warn, error: console.error }
  for (const name of Object.keys(original)) console[name] = (...args) => printed.push(inspect(args))
  try {
    for (const url of failing) {
      const err = await connect(url).then(
        () => assert.fail(`${url} connected`),
        (e) => e,
      )
      assert.ok(ERROR_CODES.includes(err.code), `${err.code}: ${err.message}`)
      seen.push(shown(err))
    }
    const url = `redis://alice:${PASSWORD}@127.0.0.1:${redis.port}`
    const [client, other] = [await connect(url), await connect(url)]
    seen.push(inspect(client), String(client))
    assert.match(inspect(client), /alice:\*\*\*@/)
    const held = await client.lock('secret').acquire()
    seen.push(inspect(held))
    const timeout = await other.lock('secret', { waitMs: 50 }).acquire().catch((e) => e)
    assert.equal(timeout.code, 'DLOCK_TIMEOUT')
    seen.push(shown(timeout))
    const bad = await client.fencedWrite('r', 0n, 'v').catch((e) => e)
    assert.equal(bad.code, 'DLOCK_INVALID_ARGUMENT')
    seen.push(shown(bad))
    await held.release()
    await client.close()
    await other.close()
    const closedErr = await client.lock('secret').acquire().catch((e) => e)
    assert.equal(closedErr.code, 'DLOCK_CLOSED')
    seen.push(shown(closedErr))
  } finally {
    Object.assign(console, original)
  }
  for (const text of [...seen, ...printed]) assert.ok(!text.includes(PASSWORD), text)
})

test('errors carry their stable code; every lost reason is listed', async () => {
  assert.deepEqual(ERROR_CODES, ['DLOCK_TIMEOUT', 'DLOCK_LOST', 'DLOCK_NOT_HELD', 'DLOCK_INVALID_ARGUMENT', 'DLOCK_BACKEND', 'DLOCK_CLOSED'])
  assert.deepEqual(LOST_REASONS, ['expired', 'not-owner', 'max-hold', 'closed', 'disconnected', 'session-expired'])
  const client = await connect('memory://codes')
  for (const bad of [1.5, -1, 2n ** 64n, 0n]) {
    await assert.rejects(client.fencedWrite('r', bad, 'v'), { code: 'DLOCK_INVALID_ARGUMENT' }, String(bad))
  }
  // A failed call's stack shows where it was made.
  const held = await client.lock('busy').acquire()
  async function takeBusy() {
    return await client.lock('busy', { waitMs: 0 }).acquire()
  }
  const err = await takeBusy().catch((e) => e)
  assert.equal(err.code, 'DLOCK_TIMEOUT')
  assert.match(err.stack, /^Error: .*\n {4}at async Lock\.acquire .*\n {4}at async takeBusy /)
  await held.release()
  const multi = client.multiLock(['b', 'a'])
  assert.ok(multi instanceof MultiLock && !(multi instanceof Lock), 'a multi-lock is not a lock with a joined name')
  assert.equal(multi.name, undefined)
  await client.close()
})

test('withLock runs the function under the lock and releases it, also when it throws', async () => {
  const url = `redis://alice:${PASSWORD}@127.0.0.1:${redis.port}`
  const client = await connect(url)
  let inside = 0
  let most = 0
  const job = async (held) => {
    inside++
    most = Math.max(most, inside)
    assert.equal((await client.status('nightly')).fencingToken, held.fencingToken)
    await new Promise((r) => setImmediate(r))
    inside--
    return held.fencingToken
  }
  const tokens = await Promise.all([1, 2, 3, 4].map(() => client.withLock('nightly', job, { leaseMs: 5000 })))
  assert.equal(most, 1, 'never two at once')
  assert.equal(new Set(tokens).size, 4)
  assert.equal((await client.status('nightly')).owner, null, 'released')
  await assert.rejects(
    client.withLock('nightly', async () => {
      throw new Error('boom')
    }),
    /boom/,
  )
  assert.equal((await client.status('nightly')).owner, null, 'released after a throw')
  const held = await client.lock('nightly').acquire()
  await assert.rejects(client.withLock('nightly', () => assert.fail('ran without the lock'), { waitMs: 0 }), { code: 'DLOCK_TIMEOUT' })
  const signal = AbortSignal.abort()
  await assert.rejects(client.withLock('nightly', () => assert.fail('ran'), { signal }), { name: 'AbortError' })
  await held.release()
  await client.close()
})
