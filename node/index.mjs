import dlock from './index.js'

export const { connect, Client, Lock, RwLock, Semaphore, Held, Engine, DEFAULT_LEASE_MS } = dlock
export default dlock
