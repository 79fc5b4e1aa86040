// One OS process of the fenced-counter test: read, check the token, write, under the lock.
import { readFileSync, writeFileSync } from 'node:fs'
import { connect } from 'dlock'

const [url, path, rounds] = process.argv.slice(2)
const client = await connect(url)
for (let i = 0; i < Number(rounds); i++) {
  const held = await client.lock('counter', { leaseMs: 5000 }).acquire()
  try {
    const state = JSON.parse(readFileSync(path, 'utf8'))
    if (BigInt(state.token) >= held.fencingToken) throw new Error('stale fencing token')
    await new Promise((r) => setTimeout(r, 1))
    writeFileSync(path, JSON.stringify({ value: state.value + 1, token: Number(held.fencingToken) }))
  } finally {
    await held.release()
  }
}
await client.close()
