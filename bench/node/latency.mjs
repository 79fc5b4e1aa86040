// Uncontended lock cycle from Node: dlock next to node-redlock (v4, on ioredis), the raw
// EVALSHA round trip, and the Rust client, all against one redis-server, in one run.
// Run with `just bench-node [iterations]` (release builds).
import { createRequire } from 'node:module'
import { execFileSync } from 'node:child_process'
import Redis from 'ioredis'
import Redlock from 'redlock'
import { startRedis } from '../../node/test/redis.mjs'

const require = createRequire(import.meta.url)
const { connect } = require('../../node/index.js')
const n = Number(process.argv[2] ?? 5000)
const rustBench = process.argv[3]

async function measure(f) {
  for (let i = 0; i < n / 10; i++) await f()
  const samples = []
  for (let i = 0; i < n; i++) {
    const start = process.hrtime.bigint()
    await f()
    samples.push(Number(process.hrtime.bigint() - start) / 1e6)
  }
  samples.sort((a, b) => a - b)
  return [samples[Math.floor(samples.length / 2)], samples[Math.floor(0.99 * (samples.length - 1))]]
}

const redis = await startRedis()
try {
  const io = new Redis(redis.port, '127.0.0.1')
  io.defineCommand('one', { numberOfKeys: 0, lua: 'return 1' })
  const rows = [['ioredis EVALSHA round trip (`return 1`)', await measure(() => io.one())]]
  const redlock = new Redlock([io], { retryCount: 0 })
  rows.push(['node-redlock acquire + release', await measure(async () => (await redlock.lock('bench-redlock', 10_000)).unlock())])
  const client = await connect(redis.url)
  const lock = client.lock('bench-dlock', { leaseMs: 10_000 })
  rows.push(['dlock acquire + release', await measure(async () => (await lock.acquire()).release())])
  if (rustBench) {
    const out = execFileSync(rustBench, [String(n), redis.url]).toString()
    const line = out.split('\n').find((l) => l.startsWith('| dlock acquire + release, redis://'))
    const cells = line.split('|').map((c) => c.trim())
    rows.push(['Rust client acquire + release', [Number(cells[2]), Number(cells[3])]])
  }
  const base = rows[0][1][0]
  console.log(`uncontended lock cycle, ${n} iterations each, one redis-server on loopback (ms)\n`)
  console.log('| operation | p50 | p99 | p50 / EVALSHA p50 |')
  console.log('| --- | ---: | ---: | ---: |')
  for (const [name, [p50, p99]] of rows) console.log(`| ${name} | ${p50.toFixed(3)} | ${p99.toFixed(3)} | ${(p50 / base).toFixed(2)} |`)
  console.log(`\ndlock / node-redlock (p50): ${(rows[2][1][0] / rows[1][1][0]).toFixed(2)}`)
  await client.close()
  io.disconnect()
} finally {
  redis.stop()
}
