/** dlock for Node.js: distributed locks with fencing tokens, FIFO hand-off and a lost-lock signal. */

export declare const DEFAULT_LEASE_MS: number
/** Every reason a held lock may be lost. */
export declare const LOST_REASONS: readonly LostReason[]
/** Every `err.code` dlock rejects with. */
export declare const ERROR_CODES: readonly DlockErrorCode[]

/** Stable `err.code`s of the errors dlock rejects with. */
export type DlockErrorCode =
  | 'DLOCK_TIMEOUT'
  | 'DLOCK_LOST'
  | 'DLOCK_NOT_HELD'
  | 'DLOCK_INVALID_ARGUMENT'
  | 'DLOCK_BACKEND'
  | 'DLOCK_CLOSED'

export interface DlockError extends Error {
  code: DlockErrorCode
}

export type LostReason = 'expired' | 'not-owner' | 'max-hold' | 'closed' | 'disconnected' | 'session-expired'

export interface ConnectOptions {
  /** How long a queued waiter keeps its place without renewing it (default 3000; on Redis never longer than the lease it waits for). */
  waiterLeaseMs?: number | null
  /** How long a backend request may take before it counts as failed (default 2000). */
  requestTimeoutMs?: number | null
  /**
   * Lock-delay (Redis only, default off): a lock whose holder stops renewing without releasing
   * stays taken this long after its lease, so a paused holder cannot clash with a new one.
   */
  lockDelayMs?: number | null
}

export interface LockOptions {
  /** Time to live on the server, renewed every third of it while held (default 30000). */
  leaseMs?: number
  /** How long `acquire()` waits; null: as long as it takes. */
  waitMs?: number | null
  /** Stop renewing and release this long after acquiring; the lock is then lost. */
  maxHoldMs?: number | null
  /** Acquires with the same owner while it holds are reentrant (same fencing token). */
  owner?: number
  /**
   * True (default): waiters are served in order, each release hands the lock to the next.
   * False (Redis): take a free lock even when others queue, and free it on release for anyone
   * to take: more throughput when some contenders are slow to answer, no order. ZooKeeper
   * refuses it.
   */
  fair?: boolean
  /**
   * 'redisson' (redis:// and redis-cluster://): lay this lock out as Redisson's RLock, shared
   * with Java services, as every lock of a `?compat=redisson` client is; the first such lock
   * connects a second client beside this one. Not fair.
   */
  compat?: 'redisson' | null
}

export interface SemaphoreOptions extends Omit<LockOptions, 'owner' | 'compat'> {
  /** The semaphore's number of permits, 1 to 1024; every client must give the same. */
  permits: number
}

export interface AcquireOptions {
  /** Aborting it stops the wait and leaves the queue. */
  signal?: AbortSignal
  waitMs?: number | null
}

export interface LockStatus {
  owner: string | null
  count: number
  fencingToken: bigint
  ttlMs: number | null
  latestToken: bigint
  waiters: string[]
}

/** Connects to a backend URL: `redis://…` (`?compat=redisson`: locks shared with Java's Redisson), `rediss://…`, `redis-cluster://…`, `redlock://…`, `zk://…` or `memory://[name]` (README: URLs). */
export declare function connect(url: string, options?: ConnectOptions): Promise<Client>

/** A node-postgres client or pool, or a mysql2 promise connection or pool. */
export interface SqlConnection {
  query(sql: string, params: unknown[]): Promise<unknown>
}

/**
 * `UPDATE table SET values…, fence = token WHERE key… AND fence <= token` on `db`, in its
 * transaction: true if the row was updated, false if its fence is newer (this holder's lock
 * was lost and a newer holder wrote) or no row has that key (docs/PROTOCOL.md §13).
 */
export declare function fencedUpdate(
  db: SqlConnection,
  table: string,
  key: Record<string, unknown>,
  values: Record<string, unknown>,
  token: bigint | number,
  options?: { fenceColumn?: string },
): Promise<boolean>

/** A distribution of durations in seconds; `buckets` are cumulative, as Prometheus keeps them: `[["0.001", n], …, ["+Inf", count]]`. */
export interface Histogram {
  count: number
  sumSeconds: number
  maxSeconds: number
  buckets: [string, number][]
}

/** What a client counted about one lock name and kind; names past the first 1,024 are counted together under `""`. */
export interface LockStats {
  name: string
  kind: 'lock' | 'semaphore' | 'read' | 'write'
  /** A semaphore's number of permits. */
  permits?: number
  /** New holds granted (reentries apart). */
  acquired: number
  /** Of those, the holds that waited for another holder first. */
  handedOff: number
  reentered: number
  /** Holds released by their owner (the last level). */
  released: number
  /** Try-acquires that found the lock held. */
  busy: number
  timedOut: number
  cancelled: number
  /** Acquires that ended with an error. */
  failed: number
  /** Holds renewed by the watchdog, one per hold per renewal sent. */
  renewals: number
  renewalsFailed: number
  /** Holds lost, per reason (`LOST_REASONS`). */
  lost: Record<string, number>
  /** Holds now. */
  held: number
  /** Acquires waiting now. */
  waiting: number
  /** From an acquire's start to its grant. */
  wait: Histogram
  /** From a grant to its release or loss. */
  hold: Histogram
}

/** The part of a prom-client `Registry` that `registerMetrics` uses. */
export interface MetricsRegistry {
  registerMetric(metric: unknown): void
}

/**
 * Exports `client`'s lock statistics to a prom-client registry (prom-client is not a dependency
 * of dlock): counters `dlock_*_total`, gauges `dlock_held` and `dlock_waiting`, histograms
 * `dlock_wait_seconds` and `dlock_hold_seconds`, labelled `name` and `kind`.
 */
export declare function registerMetrics(client: Client, registry: MetricsRegistry): void

export declare class Client {
  private constructor()
  lock(name: string, options?: LockOptions): Lock
  /** Several locks as one: all or none, in canonical order (sorted names); not reentrant. */
  multiLock(names: string[], options?: Omit<LockOptions, 'owner' | 'fair' | 'compat'>): MultiLock
  /** Many readers or one writer; `read()` and `write()` give its holds (Redis, ZooKeeper). */
  rwLock(name: string, options?: { owner?: number }): RwLock
  /** At most `permits` holders at a time; each acquire takes a permit of its own. */
  semaphore(name: string, options: SemaphoreOptions): Semaphore
  /**
   * Runs `fn(held)` while holding the lock `name` and releases it afterwards, also when `fn`
   * throws; resolves with what `fn` returns.
   */
  withLock<T>(name: string, fn: (held: Held) => T | Promise<T>, options?: LockOptions & { signal?: AbortSignal }): Promise<T>
  /**
   * The election `name`: the lock of that name, whose holder publishes a value
   * (docs/PROTOCOL.md §20). Redis, Redis Cluster and memory://.
   */
  election(name: string, options?: ElectionOptions): Election
  status(name: string): Promise<LockStatus>
  /** What this client counted about its locks, per name and kind. */
  stats(): Promise<LockStats[]>
  /**
   * Fencing at the resource: stores `value` in the Redis hash `resource` only if `token` is at
   * least the highest token stored there before; false (nothing changed) for a stale holder.
   */
  fencedWrite(resource: string, token: bigint | number, value: string): Promise<boolean>
  readonly closed: boolean
  close(): Promise<void>
  [Symbol.asyncDispose](): Promise<void>
}

/** What locks, multi-locks and semaphores share: their options, acquire and tryAcquire. */
export declare abstract class Acquirable {
  protected constructor()
  readonly leaseMs: number
  readonly waitMs: number | null
  readonly maxHoldMs: number | null
  readonly fair: boolean
  readonly compat: string | null
  /** Rejects with DLOCK_TIMEOUT when `waitMs` runs out, or with the signal's reason when aborted. */
  acquire(options?: AcquireOptions): Promise<Held>
  tryAcquire(): Promise<Held | null>
}

export declare class Lock extends Acquirable {
  readonly name: string
  readonly owner: number | undefined
  /** 'read' or 'write' for a hold of a read-write lock. */
  readonly rw: 'read' | 'write' | null
}

export declare class MultiLock extends Acquirable {
  readonly names: string[]
}

export declare class RwLock {
  private constructor()
  readonly name: string
  readonly owner: number
  read(options?: Omit<LockOptions, 'owner' | 'fair' | 'compat'>): Lock
  write(options?: Omit<LockOptions, 'owner' | 'fair' | 'compat'>): Lock
}

export declare class Semaphore extends Acquirable {
  readonly name: string
  readonly permits: number
}

export declare class Held {
  protected constructor()
  readonly name: string
  /** Larger than every earlier holder's token of this lock. */
  readonly fencingToken: bigint
  /** Each lock's fencing token by name: one, or every lock of a multi-lock (in canonical order). */
  readonly fencingTokens: Record<string, bigint>
  readonly isLost: boolean
  readonly lostReason: LostReason | null
  /** Milliseconds left of the local validity (0 once it has passed); renewals move it on. */
  readonly validForMs: number
  /** Resolves with the reason if the lock is lost, or null once released; never rejects. */
  readonly lost: Promise<LostReason | null>
  extend(leaseMs: number): Promise<void>
  release(): Promise<void>
  [Symbol.asyncDispose](): Promise<void>
}

export interface ElectionOptions {
  /** The leader's lease, renewed while it leads (default 30000): a dead leader is replaced within about that long. */
  leaseMs?: number
  /** How long a campaign may wait to lead (default: as long as it takes). */
  waitMs?: number | null
}

/** An election's leader: its term (the fencing token of the tenure that leads) and the value it proclaimed. */
export interface Leader {
  term: bigint
  value: string
}

export declare class Election {
  private constructor()
  readonly name: string
  readonly leaseMs: number
  readonly waitMs: number | null
  /**
   * Waits to lead (rejects with DLOCK_TIMEOUT after `waitMs`, or with the signal's reason
   * when aborted), then publishes `value` and resolves with the leadership.
   */
  campaign(value?: string, options?: AcquireOptions): Promise<Leadership>
  /** The current leader, null if nobody leads. */
  leader(): Promise<Leader | null>
  /** Every change of leader, pushed: the current one first, then each new term or value, null once nobody leads. */
  observe(): Observer
}

/** Leading an election, for one term. */
export declare class Leadership extends Held {
  /** The tenure's fencing token, larger than every earlier term's. */
  readonly term: bigint
  /** Publishes a new value under the same term. */
  proclaim(value: string): Promise<void>
  /** Steps down, for this term only: the next candidate leads at once. */
  resign(): Promise<void>
}

/** The changes of an election's leader; leaving the `for await` loop stops it. */
export declare class Observer implements AsyncIterableIterator<Leader | null> {
  private constructor()
  next(): Promise<IteratorResult<Leader | null>>
  return(): Promise<IteratorResult<Leader | null>>
  [Symbol.asyncIterator](): AsyncIterableIterator<Leader | null>
}

/** A value in the engine's JSON form (docs/PROTOCOL.md): inputs, outputs, configuration. */
export type EngineJson = { [key: string]: unknown }

/**
 * The sans-IO engine itself, for bringing your own I/O (e.g. an ioredis connection). Times
 * are nanoseconds: numbers (exact up to 2^53) or bigints.
 */
export declare class Engine {
  constructor(config?: EngineJson, now?: number | bigint)
  /** The configuration in effect, defaults filled in. */
  readonly config: EngineJson
  /** The pub/sub channel on which this engine's Redis waiters are woken. */
  readonly wakeChannel: string
  handleInput(now: number | bigint, input: EngineJson): void
  handleTimeout(now: number | bigint): void
  /** The next output, null when drained. */
  pollOutput(): EngineJson | null
  /** When handleTimeout must be called next (ns), null if no timer is set. */
  pollTimeout(): number | null
  /** A held lock's snapshot, null if `hold` is not held. */
  hold(hold: number): EngineJson | null
  /** What the engine counted, per lock name and kind, in the JSON form (docs/PROTOCOL.md §11). */
  stats(): EngineJson
  /** The Lua source of a protocol script (acquire, release, dequeue, extend, status). */
  static scriptSource(name: string): string
}
