import dlock from './index.js'

export const { connect, fencedUpdate, registerMetrics, Client, Acquirable, Lock, MultiLock, RwLock, Semaphore, Held, Election, Leadership, Observer, Engine, DEFAULT_LEASE_MS, LOST_REASONS, ERROR_CODES } = dlock
export default dlock
