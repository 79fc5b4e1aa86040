// The Redisson-compatible mode from Node: `?compat=redisson` on a redis:// URL lays each lock
// out as Redisson's RLock (PROTOCOL.md §19), so a Java service on Redisson and this client
// exclude each other. Redisson itself contends in `just interop`; here a holder runs
// Redisson's own acquire and unlock scripts (RedissonLock 3.52) through ioredis.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import Redis from 'ioredis'

import { connect } from 'dlock'
import { startRedis } from './redis.mjs'

const REDISSON_LOCK = `
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end;
return redis.call('pttl', KEYS[1]);`
const REDISSON_UNLOCK = `
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0;
else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end;`
const FIELD = '4f0e5b1c-7a2d-4e9b-9c3f-1d2e3f4a5b6c:1'

let server
before(async () => {
  server = await startRedis()
})
after(() => server.stop())

test('a Redisson holder and a dlock client exclude each other and wake each other', async () => {
  const client = await connect(`${server.url}/?compat=redisson`)
  const raw = new Redis(server.port)
  assert.equal(await raw.eval(REDISSON_LOCK, 1, 'invoice', 60_000, FIELD), null)
  assert.equal(await client.lock('invoice').tryAcquire(), null)
  const waiting = client.lock('invoice').acquire()
  while ((await raw.pubsub('NUMSUB', 'redisson_lock__channel:{invoice}'))[1] === 0) {
    await new Promise((r) => setTimeout(r, 10))
  }
  const released = Date.now()
  assert.equal(await raw.eval(REDISSON_UNLOCK, 2, 'invoice', 'redisson_lock__channel:{invoice}', 0, 30_000, FIELD), 1)
  const held = await waiting
  assert.ok(Date.now() - released < 30_000, 'woken by the unlock message, not the 60 s lease')
  assert.equal(String(held.fencingToken), await raw.get('redisson_lock_token:{invoice}'))
  const pttl = await raw.eval(REDISSON_LOCK, 1, 'invoice', 60_000, FIELD)
  assert.ok(pttl > 0, 'Redisson sees the dlock holder')
  await held.release()
  assert.equal(await raw.exists('invoice'), 0)
  await assert.rejects(client.semaphore('pool', { permits: 2 }).tryAcquire(), { code: 'DLOCK_INVALID_ARGUMENT' })
  await assert.rejects(connect(`${server.url}/?compat=curator`), { code: 'DLOCK_INVALID_ARGUMENT' })
  raw.disconnect()
  await client.close()
})

test("one lock of a plain client in Redisson's layout: compat: 'redisson'", async () => {
  const client = await connect(server.url)
  const raw = new Redis(server.port)
  const held = await client.lock('report', { compat: 'redisson' }).acquire()
  assert.equal(Object.keys(await raw.hgetall('report')).length, 1, "Redisson's hash at the raw name")
  assert.equal(await raw.eval(REDISSON_LOCK, 1, 'report', 60_000, FIELD) > 0, true, 'Redisson sees the holder')
  const other = await client.lock('report').tryAcquire()
  assert.notEqual(other, null, "the client's own layout is another lock")
  await other.release()
  await held.release()
  assert.equal(await raw.exists('report'), 0)
  await assert.rejects(client.lock('report', { compat: 'curator' }).tryAcquire(), { code: 'DLOCK_INVALID_ARGUMENT' })
  raw.disconnect()
  await client.close()
})
