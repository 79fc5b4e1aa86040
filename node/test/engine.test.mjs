// Engine with your own I/O: here a plain ioredis connection runs the engine's requests.
import { test } from 'node:test'
import assert from 'node:assert/strict'

import Redis from 'ioredis'
import { Engine } from 'dlock'
import { startRedis } from './redis.mjs'

const now = () => process.hrtime.bigint()

/** Feeds `inputs`, runs every request on `redis` (pub/sub skipped: this host only
 * try-acquires), and returns the events. */
async function run(engine, redis, inputs) {
  const events = []
  const pending = [...inputs]
  while (pending.length > 0) {
    engine.handleInput(now(), pending.shift())
    for (let out; (out = engine.pollOutput()) !== null; ) {
      if (out.type !== 'request') {
        events.push(out)
        continue
      }
      const { op } = out
      if (op.type === 'subscribe') {
        pending.push({ type: 'reply', id: out.id, value: { status: 'OK' } })
        continue
      }
      try {
        const source = Engine.scriptSource(op.script)
        const value = await redis.eval(source, op.keys.length, ...op.keys, ...op.args)
        pending.push({ type: 'reply', id: out.id, value })
      } catch (err) {
        pending.push({ type: 'reply', id: out.id, error: { type: 'server', message: String(err.message) } })
      }
    }
  }
  return events
}

test('bring your own ioredis connection', async () => {
  const server = await startRedis()
  const redis = new Redis(server.port, '127.0.0.1')
  try {
    const engine = new Engine({ protocol: { type: 'redis' } }, now())
    assert.equal(engine.config.client_id.length, 32)
    const acquire = { type: 'acquire', op: 1, name: 'byo', owner: 1, lease_ms: 5000, wait: 'no' }
    const [acquired] = await run(engine, redis, [acquire])
    assert.equal(acquired.type, 'acquired')
    assert.ok(Number.isSafeInteger(acquired.fencing_token) && acquired.fencing_token > 0)
    assert.ok((await redis.hget('dlock:{byo}:lock', 'owner')).startsWith(engine.config.client_id))
    assert.equal(engine.hold(acquired.hold).name, 'byo')

    const other = new Engine({}, now())
    assert.deepEqual(await run(other, redis, [acquire]), [{ type: 'not-acquired', op: 1, reason: 'busy' }])

    const released = await run(engine, redis, [{ type: 'release', op: 2, hold: acquired.hold }])
    assert.deepEqual(released, [{ type: 'released', op: 2, hold: acquired.hold, count: 0 }])
    assert.equal(await redis.exists('dlock:{byo}:lock'), 0)
  } finally {
    redis.disconnect()
    server.stop()
  }
})

test('malformed input is refused with the field named, and nothing reaches the engine', () => {
  const engine = new Engine({ client_id: '0'.repeat(31) + '1' }, 0)
  assert.equal(engine.pollOutput().op.type, 'subscribe')
  assert.throws(
    () => engine.handleInput(1, { type: 'acquire', op: 1, name: 'a', owner: 1, lease_ms: -1, wait: 'no' }),
    { code: 'DLOCK_INVALID_ARGUMENT', message: 'input.lease_ms: expected a non-negative integer' },
  )
  assert.throws(() => new Engine({ client_id: 'xyz' }), { code: 'DLOCK_INVALID_ARGUMENT', message: 'config.client_id: expected 32 hex digits' })
  assert.throws(() => engine.handleTimeout(-1), { code: 'DLOCK_INVALID_ARGUMENT' })
  assert.throws(() => Engine.scriptSource('nope'), { code: 'DLOCK_INVALID_ARGUMENT' })
  assert.equal(engine.pollOutput(), null)
})
