// The Node worker of `just bench` (bench/bench.py runs it), with the command line of the Rust
// worker (bench/src/bin/worker.rs): `uncontended LIB URL NAME N [WARMUP] [GAP_US]`,
// `contend LIB URL NAME OUT SECONDS HOLD_US OUTSIDE_US` and
// `capacity LIB URL PREFIX SECONDS TASKS LOCKS` (TASKS async loops of one client).
//
// Libraries, each with its defaults: `dlock` (the package built in node/) and `node-redlock`
// (v4 on ioredis: retries every 200 ms ± 200 ms jitter, 10 times per call; the worker calls
// again until it gets the lock).
import { createRequire } from 'node:module'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import Redis from 'ioredis'
import Redlock from 'redlock'

const require = createRequire(import.meta.url)
const { connect } = require('../../node/index.js')
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
// A blocking sleep to the microsecond (a timer rounds up to the millisecond); nothing is
// held while the worker sleeps, and the addon's own thread goes on.
const blocked = new Int32Array(new SharedArrayBuffer(4))
const sleepPrecisely = (ms) => Atomics.wait(blocked, 0, 0, ms)
const now = () => process.hrtime.bigint()
// JavaScript's own thread (the event loop, where a service's requests run): its CPU time in
// ns, from Linux's schedstat (null elsewhere). The addon's I/O and engine run on threads of
// their own, and node-redlock's on this one.
const threadCpu = () => {
  try {
    return Number(readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'utf8').split(' ')[0])
  } catch {
    return null
  }
}

/** Acquire lock `name` (waiting as long as it takes) -> the release function. */
async function library(lib, url) {
  if (lib === 'dlock') {
    const client = await connect(url)
    const locks = new Map()
    return async (name) => {
      if (!locks.has(name)) locks.set(name, client.lock(name, { leaseMs: 10_000 }))
      const held = await locks.get(name).acquire()
      return () => held.release()
    }
  }
  if (lib === 'node-redlock') {
    const redlock = new Redlock([new Redis(new URL(url).port, '127.0.0.1')])
    return async (name) => {
      for (;;) {
        try {
          const lock = await redlock.lock(name, 10_000)
          return () => lock.unlock()
        } catch (err) {
          if (err.name !== 'LockError') throw err
        }
      }
    }
  }
  throw new Error(`unknown library ${lib}`)
}

const [mode, lib, url, name] = process.argv.slice(2)
const acquire = await library(lib, url)
if (mode === 'capacity') {
  // TASKS loops take disjoint shares of LOCKS locks over and over for SECONDS.
  const [seconds, tasks, locks] = process.argv.slice(6).map(Number)
  const start = now()
  const deadline = start + BigInt(Math.round(seconds * 1e9))
  const loop = async (task) => {
    let cycles = 0
    const names = []
    for (let i = task; i < locks; i += tasks) names.push(`${name}/${i}`)
    while (names.length && now() < deadline) {
      for (const lock of names) {
        await (await acquire(lock))()
        cycles++
      }
    }
    return cycles
  }
  const counts = await Promise.all(Array.from({ length: tasks }, (_, t) => loop(t)))
  const cycles = counts.reduce((a, b) => a + b, 0)
  console.log(JSON.stringify({ cycles, seconds: Number(now() - start) / 1e9 }))
} else if (mode === 'uncontended') {
  // GAP_US (default 0): JavaScript's thread sleeps that long before each measured cycle
  // (Atomics.wait: no CPU, no event loop turn), outside the cycle's sample. With a gap every
  // thread wakes from idle on each cycle, as on a backend slower than Redis (bench/README).
  const [n, warmup = 1, gapUs = 0] = process.argv.slice(6).map(Number)
  for (let i = 0; i < warmup; i++) await (await acquire(name))()
  const samples = []
  const start = now()
  // The process's CPU time, every thread (the addon's runtime, V8's compiler and collector
  // included), in µs.
  const cpu = process.cpuUsage()
  const thread = threadCpu()
  for (let i = 0; i < n; i++) {
    if (gapUs > 0) sleepPrecisely(gapUs / 1000)
    const t = now()
    await (await acquire(name))()
    samples.push(Number(now() - t))
  }
  const used = process.cpuUsage(cpu)
  const threadUsed = thread === null ? null : threadCpu() - thread
  const total = Number(now() - start)
  // Written at once: console.log to a pipe is asynchronous, and process.exit would cut it.
  writeFileSync(1, JSON.stringify({ samples, total, cpu: (used.user + used.system) * 1000, thread: threadUsed }) + '\n')
} else {
  const [out, seconds, holdUs, outsideUs] = process.argv.slice(6)
  writeFileSync(`${out}.ready`, '')
  while (!existsSync(join(dirname(out), 'go'))) await sleep(1)
  const deadline = now() + BigInt(Math.round(Number(seconds) * 1e9))
  const lines = []
  while (now() < deadline) {
    const requested = now()
    const release = await acquire(name)
    const acquired = now()
    // Held for exactly holdUs (a spin on the monotonic clock: a timer rounds 1 ms up).
    const until = acquired + BigInt(holdUs) * 1000n
    while (now() < until);
    const released = now()
    await release()
    lines.push(`${requested} ${acquired} ${released}\n`)
    sleepPrecisely(Number(outsideUs) / 1000)
  }
  writeFileSync(out, lines.join(''))
}
process.exit(0)
