// One contender of the live mixed-language test (contract/tests/contention.rs), in Node.
//
// `node contend.mjs URL NAME DIR LABEL TARGET [lock|rw|sem]` acquires lock NAME until the counter
// in DIR/counter reaches TARGET, starting when DIR/go appears (it writes DIR/LABEL.ready once
// connected); each tenure does a fenced read-modify-write of the counter and
// appends `token start_ns end_ns outcome` (CLOCK_MONOTONIC; 0 written, 1 refused as stale,
// 2 target reached, 3 a read hold, 4 a permit) to DIR/LABEL.log, as the Rust, Python and Java
// workers do. In mode `rw` it takes the write hold of read-write lock NAME, and every third
// time its read hold; in mode `sem` a permit of semaphore NAME (2 permits) TARGET times, each
// for 5 ms. The dlock package is loaded from DLOCK_NODE_PACKAGE (default: 'dlock').
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'

const dlock = createRequire(import.meta.url)(process.env.DLOCK_NODE_PACKAGE ?? 'dlock')

/** Writes `count+1 token` over `count last` (0), unless the token is not newer (1) or the
 * count has reached the target (2). */
function fencedIncrement(counter, token, target) {
  const fields = existsSync(counter) ? readFileSync(counter, 'utf8').split(/\s+/).filter(Boolean).map(BigInt) : []
  const [count, last] = [fields[0] ?? 0n, fields[1] ?? 0n]
  if (token <= last) return 1
  if (count >= target) return 2
  writeFileSync(counter, `${count + 1n} ${token}\n`)
  return 0
}

const [url, name, dir, label, target, mode] = process.argv.slice(2)
const rw = mode === 'rw'
const client = await dlock.connect(url)
const rwLock = rw ? client.rwLock(name) : null
const [write, read] = rw
  ? [rwLock.write({ leaseMs: 10_000 }), rwLock.read({ leaseMs: 10_000 })]
  : [client.lock(name, { leaseMs: 10_000 }), null]
writeFileSync(join(dir, `${label}.ready`), '')
while (!existsSync(join(dir, 'go'))) await new Promise((r) => setTimeout(r, 1))
const log = []
if (mode === 'sem') {
  const semaphore = client.semaphore(name, { permits: 2, leaseMs: 10_000 })
  for (let i = 0; i < Number(target); i++) {
    const held = await semaphore.acquire()
    const start = process.hrtime.bigint()
    await new Promise((r) => setTimeout(r, 5))
    const end = process.hrtime.bigint()
    await held.release()
    log.push(`${held.fencingToken} ${start} ${end} 4\n`)
  }
}
for (let outcome = mode === 'sem' ? 2 : 0, i = 0; outcome !== 2; i++) {
  const reading = rw && i % 3 === 2
  const held = await (reading ? read : write).acquire()
  const start = process.hrtime.bigint()
  const result = reading ? 3 : fencedIncrement(join(dir, 'counter'), BigInt(held.fencingToken), BigInt(target))
  const end = process.hrtime.bigint()
  await held.release()
  if (!reading) outcome = result
  log.push(`${held.fencingToken} ${start} ${end} ${result}\n`)
}
writeFileSync(join(dir, `${label}.log`), log.join(''))
await client.close()
