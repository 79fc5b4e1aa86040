// What the backend tests share: two clients, two workers each, take one lock five times each;
// never two holders at once, and the fencing tokens (bigints) grow in the order of the holds.
import assert from 'node:assert/strict'

import { connect } from 'dlock'

export async function twoClientsContend(url, name) {
  const a = await connect(url)
  const b = await connect(url)
  const tokens = []
  let inside = false
  const worker = async (client) => {
    for (let i = 0; i < 5; i++) {
      const held = await client.lock(name).acquire({ waitMs: 60_000 })
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
  return { a, b }
}
