// Type-checked with `tsc --strict` and run (downlevelled for Node 20) by typescript.test.mjs:
// the API as TypeScript users write it, `await using` included.
import { connect, type Client, type Held, type LockStatus, type DlockError, type LostReason } from 'dlock'

async function main(url: string): Promise<void> {
  const client: Client = await connect(url, { requestTimeoutMs: 2000 })
  let token: bigint
  {
    await using held = await client.lock('typed', { leaseMs: 10_000, waitMs: 5_000 }).acquire()
    token = held.fencingToken
    const status: LockStatus = await client.status('typed')
    if (status.owner === null || status.fencingToken !== token) throw new Error('not held inside the block')
  }
  const after: LockStatus = await client.status('typed')
  if (after.owner !== null) throw new Error('await using did not release')
  const maybe: Held | null = await client.lock('typed').tryAcquire()
  if (maybe === null) throw new Error('free lock not acquired')
  const reason: Promise<LostReason | null> = maybe.lost
  await maybe.release()
  if ((await reason) !== null) throw new Error('released, not lost')
  try {
    await client.lock('', {}).acquire()
  } catch (err) {
    if ((err as DlockError).code !== 'DLOCK_INVALID_ARGUMENT') throw err
  }
  await client.close()
  console.log(`ok ${token}`)
}

void main(process.argv[2] ?? 'memory://typed')
