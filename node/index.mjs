import dlock from './index.js'

export const { connect, Client, Lock, Semaphore, Held, Engine, DEFAULT_LEASE_MS } = dlock
export default dlock
