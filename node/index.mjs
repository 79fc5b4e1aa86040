import dlock from './index.js'

export const { connect, Client, Lock, Held, Engine, DEFAULT_LEASE_MS } = dlock
export default dlock
