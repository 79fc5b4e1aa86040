'use strict'
// dlock for Node.js: distributed locks with fencing tokens, FIFO hand-off and a lost-lock
// signal. The lock semantics are dlock's Rust engine (the same one the Rust crate, the
// Python package and the Wasm component run), loaded from the native addon.

const { inspect } = require('node:util')
const native = loadAddon()

/**
 * The addon, through napi-rs's loader (binding.js): dlock.<platform>.node beside this file, or
 * else the platform's package (dlock-linux-x64-gnu, …), which npm installs as an optional
 * dependency where os, cpu and libc match. When neither loads, the error names the package
 * this platform needs and how to get it, instead of the loader's chain of failures.
 */
function loadAddon() {
  try {
    return require('./binding.js')
  } catch (err) {
    throw addonError()
  }
}

function addonError() {
  const { version, optionalDependencies } = require('./package.json')
  const abi =
    process.platform === 'win32'
      ? '-msvc'
      : process.platform !== 'linux'
        ? ''
        : process.report.getReport().header.glibcVersionRuntime
          ? '-gnu'
          : '-musl'
  const platform = `${process.platform}-${process.arch}${abi}`
  const wanted = `dlock-${platform}`
  let message
  let code = 'MODULE_NOT_FOUND'
  if (!optionalDependencies) {
    message = `dlock: no native addon dlock.${platform}.node in ${__dirname} (\`just dist node\` builds it)`
  } else if (!(wanted in optionalDependencies)) {
    const shipped = Object.keys(optionalDependencies).map((name) => name.slice('dlock-'.length))
    message = `dlock ${version} has no native addon for ${platform}; it ships for ${shipped.join(', ')}`
  } else {
    try {
      const installed = require(`${wanted}/package.json`).version
      require(wanted)
      message = `dlock ${version}: the native addon ${wanted} ${installed} loads, but the loader refused it`
    } catch (err) {
      if (err.code === 'MODULE_NOT_FOUND') {
        message =
          `dlock: the native addon for ${platform} is the package ${wanted}, which is not installed. ` +
          'npm installs it with dlock as an optional dependency, and leaves it out when optional ' +
          'dependencies are omitted (--omit=optional) or a lock file made on another platform is ' +
          `reused. Install it: npm install ${wanted}@${version}`
      } else {
        code = 'ERR_DLOPEN_FAILED'
        message = `dlock: the native addon ${wanted} is installed but does not load: ${String(err.message).split('\n')[0]}`
      }
    }
  }
  const err = new Error(message)
  err.code = code
  err.stack = `Error: ${message}` // the message is the whole story: no frames of the loader
  return err
}

const { DEFAULT_LEASE_MS } = native
/** Every reason a held lock may be lost (`held.lostReason`). */
const LOST_REASONS = Object.freeze(native.lostReasons())
/** Every `err.code` dlock rejects with. */
const ERROR_CODES = Object.freeze(native.errorCodes())
const CODE = /^(DLOCK_[A-Z_]+): ([\s\S]*)$/

/**
 * Moves the code the addon puts at the front of a message to `err.code`. A call the addon
 * settles fails with the message alone: the Error is made here, in the caller's async frames.
 */
function coded(err) {
  if (typeof err === 'string') {
    err = new Error(err)
    Error.captureStackTrace(err, call)
  }
  const m = err instanceof Error ? CODE.exec(err.message) : null
  if (m) {
    err.code = m[1]
    err.message = m[2]
    const frames = err.stack.indexOf('\n')
    err.stack = `${err.name}: ${m[2]}${frames < 0 ? '' : err.stack.slice(frames)}`
  }
  return err
}

/** The addon's calls under way, by id: how each one's promise settles. */
const settling = new Map()
let lastCall = 0

/** How the addon ends call `id` (every client's calls): with `value`, or a coded message. */
function settle(id, ok, value) {
  const [resolve, reject] = settling.get(id)
  settling.delete(id)
  if (ok) resolve(value)
  else reject(value)
}

/**
 * Starts the addon's call `start(id)`, which returns at once, and waits for it to settle; a
 * failure rejects with its code. Bad arguments throw from `start` and reject the same way.
 */
async function call(start) {
  lastCall = lastCall === 0xffffffff ? 1 : lastCall + 1
  const id = lastCall
  try {
    return await new Promise((resolve, reject) => {
      start(id)
      settling.set(id, [resolve, reject])
    })
  } catch (err) {
    throw coded(err)
  }
}

function invalid(message) {
  const err = new TypeError(message)
  err.code = 'DLOCK_INVALID_ARGUMENT'
  return err
}

function abortError(signal) {
  if (signal.reason !== undefined) return signal.reason
  const err = new Error('the acquire was aborted')
  err.name = 'AbortError'
  err.code = 'ABORT_ERR'
  return err
}

let nextOwner = 1

/**
 * Runs the addon's wait `start(id, cancellable)`, which an aborted `signal` stops (the wait
 * then leaves the queue and this rejects with the signal's reason).
 */
async function abortable(inner, signal, start) {
  if (!signal) return call((id) => start(id, false))
  if (signal.aborted) throw abortError(signal)
  let started
  const abort = () => inner.cancel(started)
  signal.addEventListener('abort', abort, { once: true })
  try {
    const out = await call((id) => start((started = id), true))
    if (out === null) throw abortError(signal)
    return out
  } finally {
    signal.removeEventListener('abort', abort)
  }
}

/** The fields of `fields` that are set: the addon takes an absent option as its default. */
function defined(fields) {
  return Object.fromEntries(Object.entries(fields).filter(([, value]) => value != null))
}

/** Connects to a backend URL: `redis://…`, `rediss://…`, `redis-cluster://…`, `redlock://…`, `zk://…` or `memory://[name]` (README: URLs). */
async function connect(url, options = {}) {
  if (typeof url !== 'string') throw invalid('url must be a string')
  const { waiterLeaseMs, requestTimeoutMs, lockDelayMs } = options
  const settings = defined({ waiterLeaseMs, requestTimeoutMs, lockDelayMs })
  const inner = await call((id) => native.connect(id, url, settings, settle))
  return new Client(inner, url)
}

class Client {
  #native
  #url

  constructor(inner, url) {
    this.#native = inner
    this.#url = url
  }

  /**
   * A lock to acquire: `{ leaseMs = 30000, waitMs, maxHoldMs, owner, fair = true, compat }`.
   * `fair: false` (Redis) takes a free lock even when others queue and frees it on release
   * instead of handing it to the next in line: more throughput when some contenders are slow
   * to answer, no order. `compat: 'redisson'` (redis:// and redis-cluster://) lays this lock
   * out as Redisson's RLock, shared with Java services, as every lock of a `?compat=redisson`
   * client is (the first such lock connects a second client beside this one).
   */
  lock(name, options = {}) {
    return new Lock(this.#native, name, options)
  }

  /**
   * Several locks to acquire as one: all of them or none, in one canonical order (names
   * sorted) so that overlapping sets never deadlock; losing one loses them all. Options as
   * for `lock` (no `owner`: a multi-lock is not reentrant); `waitMs` bounds the whole set.
   * The held object's `fencingTokens` gives each name's token.
   */
  multiLock(names, options = {}) {
    if (!Array.isArray(names) || !names.every((n) => typeof n === 'string')) {
      throw invalid('names must be an array of strings')
    }
    return new MultiLock(this.#native, names, options)
  }

  /**
   * A semaphore with `permits` permits (1 to 1024): at most that many holders at a time,
   * across every client (Redisson's PermitExpirableSemaphore). Each acquire takes a permit of
   * its own: a Held with its own lease, renewal, fencing token and release. Options as for
   * `lock` (no `owner`: not reentrant). Every client must give the same `permits`: on Redis,
   * while anyone holds or waits, another number rejects with DLOCK_INVALID_ARGUMENT. Redis,
   * Redis Cluster and ZooKeeper (Redlock refuses it).
   */
  semaphore(name, options = {}) {
    return new Semaphore(this.#native, name, options)
  }

  /**
   * A read-write lock: `read(options)` and `write(options)` give its holds, acquired like
   * locks (options as for `lock`, without `owner` and `fair`). Many readers hold it at once,
   * or one writer alone; a reader that arrives while a writer waits queues behind it (writer
   * preference). The holds of one RwLock belong to one owner (`{ owner }` to choose it): each
   * is reentrant, and a writer may read beside its write hold, then release the write
   * (downgrade); asking to write while reading rejects with DLOCK_INVALID_ARGUMENT (no
   * upgrade). Redis, Redis Cluster and ZooKeeper.
   */
  rwLock(name, { owner } = {}) {
    return new RwLock(this.#native, name, owner)
  }

  /**
   * The election `name` (docs/PROTOCOL.md §20): the lock of that name, whose holder publishes
   * a value. `campaign(value)` waits to lead, `leader()` reads who leads, `observe()` follows
   * each change. Options: `{ leaseMs = 30000, waitMs }` — the leader's lease, renewed while it
   * leads (a dead leader is replaced within about that long), and how long a campaign may
   * wait. Redis, Redis Cluster and memory://.
   */
  election(name, options = {}) {
    return new Election(this.#native, name, options)
  }

  /**
   * Runs `fn(held)` while holding the lock `name` (options as for `lock`, plus `signal` for
   * the wait) and releases it afterwards, also when `fn` throws; resolves with what `fn`
   * returns. The fenced-work pattern in one call:
   *
   *     await client.withLock('nightly', async (held) => report(held.fencingToken), { waitMs: 0 })
   */
  async withLock(name, fn, options = {}) {
    if (typeof fn !== 'function') throw invalid('fn must be a function')
    const { signal, ...lockOptions } = options
    const held = await this.lock(name, lockOptions).acquire({ signal })
    let result
    try {
      result = await fn(held)
    } catch (err) {
      await held.release().catch(() => {})
      throw err
    }
    await held.release()
    return result
  }

  /**
   * What this client counted about its locks, one object per lock name and kind: acquisitions,
   * hand-offs, wait and hold times (seconds), renewals, losses by reason, and the holds and
   * waiters of now. The engine counts them from its own clock, the same way in every language;
   * `registerMetrics` exports them to prom-client.
   */
  async stats() {
    return lockStats(await call((id) => this.#native.stats(id)))
  }

  /** Who holds `name`, with which fencing token, for how long, and who waits. */
  async status(name) {
    const s = await call((id) => this.#native.status(id, name))
    return { ...s, owner: s.owner ?? null, ttlMs: s.ttlMs ?? null }
  }

  /**
   * Fencing at the resource, in one call: stores `value` in the Redis hash `resource` (fields
   * `value` and `fence`) only if `token` (the lock's fencingToken) is at least the highest
   * token stored there before. Resolves false, changing nothing, for a stale holder.
   */
  async fencedWrite(resource, token, value) {
    return call((id) => this.#native.fencedWrite(id, resource, token, value))
  }

  get closed() {
    return this.#native.closed
  }

  /** Stops taking calls; locks still held stay held until released. */
  async close() {
    this.#native.close()
  }

  async [Symbol.asyncDispose]() {
    await this.close()
  }

  [inspect.custom]() {
    return `Client <${native.redact(this.#url)} ${this.closed ? 'closed' : `id=${this.#native.id}`}>`
  }
}

/** What every acquirable primitive shares: the spec the addon takes, acquire and tryAcquire. */
class Acquirable {
  #native

  constructor(inner, { leaseMs = DEFAULT_LEASE_MS, waitMs = null, maxHoldMs = null, fair = true, compat = null } = {}) {
    if (typeof fair !== 'boolean') throw invalid('fair must be a boolean')
    if (compat !== null && typeof compat !== 'string') throw invalid('compat must be a string')
    this.#native = inner
    this.leaseMs = leaseMs
    this.waitMs = waitMs
    this.maxHoldMs = maxHoldMs
    this.fair = fair
    this.compat = compat
  }

  /**
   * What to acquire, as the addon takes it: `_target()` (`[name, names, permits, rw]`, which
   * the subclass names), then `leaseMs, waitMs, maxHoldMs, owner, fair, compat`, null where
   * unset. An array: it is built and read on every acquire, and an object of the same cost
   * several times as much on both sides of the addon.
   */
  _spec(waitMs) {
    const [name, names, permits, rw] = this._target()
    return [name, names, permits, rw, this.leaseMs, waitMs, this.maxHoldMs, this._owner(), this.fair, this.compat]
  }

  /** Whose acquire it is: null, not reentrant (a lock says otherwise). */
  _owner() {
    return null
  }

  /**
   * Waits for it, up to `waitMs` (as long as it takes if null). Rejects with code
   * DLOCK_TIMEOUT when the wait runs out; an aborted `signal` leaves the queue and rejects.
   */
  async acquire({ signal, waitMs = this.waitMs } = {}) {
    const spec = this._spec(waitMs)
    return new Held(await abortable(this.#native, signal, (id, cancellable) => this.#native.acquire(id, spec, cancellable)))
  }

  /** Takes it if it is free now; null otherwise. */
  async tryAcquire() {
    const inner = await call((id) => this.#native.tryAcquire(id, this._spec(null)))
    return inner === null ? null : new Held(inner)
  }
}

class Lock extends Acquirable {
  constructor(inner, name, options = {}, rw = null) {
    if (typeof name !== 'string') throw invalid('name must be a string')
    const { owner } = options
    if (owner !== undefined && !Number.isSafeInteger(owner)) throw invalid('owner must be a safe integer')
    super(inner, options)
    this.name = name
    this.owner = owner
    /** 'read' or 'write' for a hold of a read-write lock, else null. */
    this.rw = rw
  }

  _target() {
    return [this.name, null, null, this.rw]
  }

  /** Its `owner`, or a fresh one for each acquire. */
  _owner() {
    return this.owner ?? nextOwner++
  }

  [inspect.custom]() {
    return `Lock <${JSON.stringify(this.name)}${this.rw ? ` ${this.rw}` : ''} leaseMs=${this.leaseMs}>`
  }
}

class MultiLock extends Acquirable {
  constructor(inner, names, { leaseMs, waitMs, maxHoldMs } = {}) {
    super(inner, { leaseMs, waitMs, maxHoldMs })
    this.names = [...names]
  }

  _target() {
    return [null, this.names, null, null]
  }

  [inspect.custom]() {
    return `MultiLock <${JSON.stringify(this.names)} leaseMs=${this.leaseMs}>`
  }
}

class RwLock {
  #native

  constructor(inner, name, owner = nextOwner++) {
    if (typeof name !== 'string') throw invalid('name must be a string')
    if (!Number.isSafeInteger(owner)) throw invalid('owner must be a safe integer')
    this.#native = inner
    this.name = name
    this.owner = owner
  }

  /** The read hold. */
  read(options = {}) {
    return this.#hold('read', options)
  }

  /** The write hold. */
  write(options = {}) {
    return this.#hold('write', options)
  }

  #hold(rw, { leaseMs, waitMs, maxHoldMs } = {}) {
    return new Lock(this.#native, this.name, { leaseMs, waitMs, maxHoldMs, owner: this.owner }, rw)
  }

  [inspect.custom]() {
    return `RwLock <${JSON.stringify(this.name)}>`
  }
}

class Semaphore extends Acquirable {
  constructor(inner, name, { permits, leaseMs, waitMs, maxHoldMs, fair } = {}) {
    if (typeof name !== 'string') throw invalid('name must be a string')
    // A whole number the addon can take; the engine checks the range (1 to 1024).
    if (!Number.isInteger(permits) || permits < 0 || permits > 0xffffffff) {
      throw invalid(`permits must be a whole number of permits, got ${permits}`)
    }
    super(inner, { leaseMs, waitMs, maxHoldMs, fair })
    this.name = name
    this.permits = permits
  }

  _target() {
    return [this.name, null, this.permits, null]
  }

  [inspect.custom]() {
    return `Semaphore <${JSON.stringify(this.name)} permits=${this.permits} leaseMs=${this.leaseMs}>`
  }
}

class Held {
  #native
  #lost

  constructor(inner) {
    this.#native = inner
  }

  get name() {
    return this.#native.name
  }

  /** Larger than every earlier holder's token of this lock (bigint). */
  get fencingToken() {
    return this.#native.fencingToken
  }

  /** Each lock's fencing token (bigint) by name: one, or every lock of a multi-lock. */
  get fencingTokens() {
    return Object.fromEntries(this.#native.members.map((m) => [m.name, m.fencingToken]))
  }

  get isLost() {
    return this.#native.lostReason !== null
  }

  /** One of LOST_REASONS once lost, else null. */
  get lostReason() {
    return this.#native.lostReason
  }

  /**
   * Milliseconds left of the local validity: the server cannot give the lock to another
   * before it runs out, and renewals move it on; work that must not overlap the next
   * holder's stops by then (0 once it has passed).
   */
  get validForMs() {
    return this.#native.validForMs
  }

  /** Resolves with the reason if the lock is lost (null once released); never rejects. */
  get lost() {
    this.#lost ??= call((id) => this.#native.waitLost(id))
    return this.#lost
  }

  /** Renews now with `leaseMs`, which later renewals keep using. */
  async extend(leaseMs) {
    return call((id) => this.#native.extend(id, leaseMs))
  }

  /** Releases the lock. Rejects with DLOCK_LOST if it was lost, DLOCK_NOT_HELD if already released. */
  async release() {
    return call((id) => this.#native.release(id))
  }

  /** `await using held = await lock.acquire()` releases it at the end of the block. */
  async [Symbol.asyncDispose]() {
    if (this.#native.held) await this.release()
  }

  [inspect.custom]() {
    const state = this.isLost ? `lost (${this.lostReason})` : this.#native.held ? 'held' : 'released'
    return `Held <${JSON.stringify(this.name)} fencingToken=${this.fencingToken} ${state}>`
  }
}

class Election {
  #native

  constructor(inner, name, { leaseMs = DEFAULT_LEASE_MS, waitMs = null } = {}) {
    if (typeof name !== 'string') throw invalid('name must be a string')
    this.#native = inner
    this.name = name
    this.leaseMs = leaseMs
    this.waitMs = waitMs
  }

  /**
   * Waits to lead (up to `waitMs`: rejects with DLOCK_TIMEOUT), then publishes `value` — who
   * this candidate is, where to reach it — and resolves with the Leadership. Candidates lead
   * one at a time, first come, first served. An aborted `signal` leaves the queue and rejects.
   */
  async campaign(value = '', { signal, waitMs = this.waitMs } = {}) {
    if (typeof value !== 'string') throw invalid('value must be a string')
    const start = (id, cancellable) =>
      this.#native.campaign(id, this.name, value, this.leaseMs, waitMs ?? undefined, cancellable)
    return new Leadership(await abortable(this.#native, signal, start))
  }

  /** The current leader, `{ term, value }` (term a bigint), or null if nobody leads. */
  async leader() {
    return (await call((id) => this.#native.leader(id, this.name))) ?? null
  }

  /**
   * Every change of leader, pushed, as an async iterator: the current leader first, then each
   * new term or value, and null once nobody leads. Leaving the `for await` loop stops it.
   */
  observe() {
    return new Observer(sync(() => this.#native.observe(this.name)))
  }

  [inspect.custom]() {
    return `Election <${JSON.stringify(this.name)} leaseMs=${this.leaseMs}>`
  }
}

/** Leading an election, for one term: a Held whose holder published a value. */
class Leadership extends Held {
  #native

  constructor(inner) {
    super(inner)
    this.#native = inner
  }

  /** The term (bigint): the tenure's fencing token, larger than every earlier term's. */
  get term() {
    return this.fencingToken
  }

  /** Publishes a new value under the same term. */
  async proclaim(value) {
    if (typeof value !== 'string') throw invalid('value must be a string')
    return call((id) => this.#native.proclaim(id, value))
  }

  /** Steps down, for this term only: the next candidate leads at once. Rejects with DLOCK_LOST if leadership was lost. */
  async resign() {
    return this.release()
  }

  [inspect.custom]() {
    const state = this.isLost ? `lost (${this.lostReason})` : 'leading'
    return `Leadership <${JSON.stringify(this.name)} term=${this.term} ${state}>`
  }
}

/** The changes of an election's leader: an async iterator (see Election#observe). */
class Observer {
  #native

  constructor(inner) {
    this.#native = inner
  }

  async next() {
    try {
      return { value: (await call((id) => this.#native.next(id))) ?? null, done: false }
    } catch (err) {
      if (err.code === 'DLOCK_CLOSED') return { value: undefined, done: true }
      throw err
    }
  }

  async return() {
    this.#native.close()
    return { value: undefined, done: true }
  }

  [Symbol.asyncIterator]() {
    return this
  }
}

function sync(f) {
  try {
    return f()
  } catch (err) {
    throw coded(err)
  }
}

function nanos(now) {
  return typeof now === 'bigint' ? Number(now) : now
}

/**
 * The sans-IO engine itself, for bringing your own I/O (e.g. an ioredis connection): plain
 * objects in and out in the JSON form of docs/PROTOCOL.md, times in nanoseconds (numbers,
 * exact up to 2^53, or bigints). Feed it with handleInput/handleTimeout, drain pollOutput()
 * until it returns null, and call handleTimeout again at pollTimeout().
 */
class Engine {
  #native

  constructor(config = {}, now = 0) {
    this.#native = sync(() => new native.NativeEngine(JSON.stringify(config), nanos(now)))
  }

  /** The configuration in effect, defaults filled in. */
  get config() {
    return JSON.parse(this.#native.config)
  }

  /** The pub/sub channel on which this engine's Redis waiters are woken. */
  get wakeChannel() {
    return this.#native.wakeChannel
  }

  handleInput(now, input) {
    sync(() => this.#native.handleInput(nanos(now), JSON.stringify(input)))
  }

  handleTimeout(now) {
    sync(() => this.#native.handleTimeout(nanos(now)))
  }

  /** The next output, null when drained. */
  pollOutput() {
    const out = this.#native.pollOutput()
    return out == null ? null : JSON.parse(out)
  }

  /** When handleTimeout must be called next (ns), null if no timer is set. */
  pollTimeout() {
    return this.#native.pollTimeout() ?? null
  }

  /** A held lock's snapshot, null if `hold` is not held. */
  hold(hold) {
    const h = sync(() => this.#native.hold(hold))
    return h == null ? null : JSON.parse(h)
  }

  /** What the engine counted, per lock name and kind, in the JSON form (docs/PROTOCOL.md §11). */
  stats() {
    return JSON.parse(this.#native.stats())
  }

  /** The Lua source of a protocol script (acquire, release, dequeue, extend, status). */
  static scriptSource(name) {
    return sync(() => native.NativeEngine.scriptSource(name))
  }
}

/** The addon's JSON of `dlock::json::stats_to_json`, with camelCase keys (`handedOff`). */
function lockStats(json) {
  const histogram = ({ count, sum_seconds, max_seconds, buckets }) => ({
    count,
    sumSeconds: sum_seconds,
    maxSeconds: max_seconds,
    buckets,
  })
  return JSON.parse(json).locks.map((s) => {
    const out = {}
    for (const [key, value] of Object.entries(s)) out[camel(key)] = value
    return { ...out, wait: histogram(s.wait), hold: histogram(s.hold) }
  })
}

/** The metric names every host exports (the Rust crate's `dlock::prometheus`). */
const METRICS = JSON.parse(native.metricsTable())
const camel = (key) => key.replace(/_([a-z])/g, (_, c) => c.toUpperCase())

/**
 * Exports `client`'s lock statistics to a prom-client `registry` (prom-client is not a
 * dependency of dlock: pass your own `register` or `new Registry()`). Each scrape reads one
 * snapshot (`client.stats()`). The names are every host's (the Rust crate's
 * `dlock::prometheus`): counters `dlock_*_total` and `dlock_lost_total{reason}`, gauges
 * `dlock_held` and `dlock_waiting`, histograms `dlock_wait_seconds` and `dlock_hold_seconds`,
 * all labelled `name` and `kind`.
 */
function registerMetrics(client, registry) {
  if (registry == null || typeof registry.registerMetric !== 'function') {
    throw invalid('registry must be a prom-client Registry (its register, or new Registry())')
  }
  // One snapshot serves every metric of a scrape: prom-client asks them all at once.
  let snapshot = null
  const stats = () => {
    snapshot ??= client.stats().finally(() => setImmediate(() => { snapshot = null }))
    return snapshot
  }
  const labels = (s) => ({ name: s.name, kind: s.kind })
  const metric = (name, help, type, values) => {
    const m = {
      name,
      help,
      type,
      aggregator: 'sum',
      async get() {
        return { name, help, type, aggregator: 'sum', values: values(await stats()) }
      },
    }
    registry.registerMetric(m)
  }
  for (const [type, table] of [['counter', METRICS.counters], ['gauge', METRICS.gauges]]) {
    for (const [field, name, help] of table) {
      metric(name, help, type, (locks) => locks.map((s) => ({ labels: labels(s), value: s[camel(field)] })))
    }
  }
  const [lost, lostHelp] = METRICS.lost
  metric(lost, lostHelp, 'counter', (locks) =>
    locks.flatMap((s) => Object.entries(s.lost).map(([reason, value]) => ({ labels: { ...labels(s), reason }, value }))))
  for (const [field, name, help] of METRICS.histograms) {
    metric(name, help, 'histogram', (locks) => locks.flatMap((s) => {
      const h = s[field]
      return [
        ...h.buckets.map(([le, value]) => ({ metricName: `${name}_bucket`, labels: { ...labels(s), le }, value })),
        { metricName: `${name}_sum`, labels: labels(s), value: h.sumSeconds },
        { metricName: `${name}_count`, labels: labels(s), value: h.count },
      ]
    }))
  }
}

/**
 * Fencing at a row of your own database, in one call: `UPDATE table SET values…, fence = token
 * WHERE key… AND fence <= token` on `db` — a node-postgres client or pool, or a mysql2
 * (promise) connection or pool — in whatever transaction it is in. True if a row was updated;
 * false if none was: the row's fence is newer than `token` (this holder's lock was lost and a
 * newer holder wrote), or no row has that key. The statement is the Rust crate's
 * (`dlock::fenced_update_sql`, docs/PROTOCOL.md §13), as every host builds it.
 */
async function fencedUpdate(db, table, key, values, token, options = {}) {
  if (db == null || typeof db.query !== 'function') throw invalid('db must be a node-postgres or mysql2 client or pool')
  if (typeof token !== 'bigint' && !Number.isSafeInteger(token)) throw invalid('a fencing token is a bigint or a safe integer')
  if (BigInt(token) <= 0n) throw invalid('a fencing token is positive')
  for (const [what, columns] of [['key', key], ['values', values]]) {
    if (columns === null || typeof columns !== 'object' || Array.isArray(columns)) throw invalid(`${what} must be an object of column: value`)
  }
  const { fenceColumn = 'fence' } = options
  // mysql2's clients and pools have execute(); node-postgres's do not.
  const placeholder = typeof db.execute === 'function' ? 'question' : 'numbered'
  let sql
  try {
    sql = native.fencedUpdateSql(table, Object.keys(key), Object.keys(values), fenceColumn, placeholder)
  } catch (err) {
    throw coded(err)
  }
  // The token as text: both databases compare it with the bigint column as a number, and no
  // driver has to know bigint.
  const params = [...Object.values(values), String(token), ...Object.values(key), String(token)]
  const result = await db.query(sql, params)
  const affected = Array.isArray(result) ? result[0].affectedRows : result.rowCount
  return affected > 0
}

module.exports = { connect, fencedUpdate, registerMetrics, Client, Acquirable, Lock, MultiLock, RwLock, Semaphore, Held, Election, Leadership, Observer, Engine, DEFAULT_LEASE_MS, LOST_REASONS, ERROR_CODES }
