import dlock from './index.js'

export const { connect, Client, Lock, Held, DEFAULT_LEASE_MS } = dlock
export default dlock
