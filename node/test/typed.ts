// Type-checked with `tsc --strict` and run (downlevelled for Node 20) by typescript.test.mjs:
// the API as TypeScript users write it, `await using` included.
import { connect, ERROR_CODES, LOST_REASONS, type Client, type Election, type Held, type Leader, type Leadership, type LockStatus, type DlockError, type DlockErrorCode, type LostReason } from 'dlock'

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
    const code: DlockErrorCode = (err as DlockError).code
    if (code !== 'DLOCK_INVALID_ARGUMENT' || !ERROR_CODES.includes(code)) throw err
  }
  const doubled: number = await client.withLock('typed', async (held: Held) => Number(held.fencingToken) * 2, { waitMs: 1_000 })
  if (doubled < 2) throw new Error('withLock did not run under the lock')
  const election: Election = client.election('typed-election', { leaseMs: 5_000 })
  const lead: Leadership = await election.campaign('me')
  const term: bigint = lead.term
  await lead.proclaim('me too')
  const leader: Leader | null = await election.leader()
  if (leader === null || leader.term !== term) throw new Error('the leader is the campaign')
  for await (const seen of election.observe()) {
    if (seen?.value === 'me too') break
  }
  await lead.resign()
  const reasons: readonly LostReason[] = LOST_REASONS
  if (reasons.length !== 6) throw new Error('every lost reason')
  await client.close()
  console.log(`ok ${token}`)
}

void main(process.argv[2] ?? 'memory://typed')
