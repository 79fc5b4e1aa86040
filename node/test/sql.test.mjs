// The npm package on PostgreSQL and MariaDB: postgres:// and mysql:// are only other URLs.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'

import { connect } from 'dlock'
import { twoClientsContend } from './contention.mjs'
import { startMariadb } from './mariadb.mjs'
import { startPostgres } from './postgres.mjs'

const databases = { postgres: startPostgres, mariadb: startMariadb }

for (const [kind, start] of Object.entries(databases)) {
  let db
  before(async () => {
    db = await start()
  })
  after(() => db.stop())

  test(`locks on ${kind} exclude, fence with increasing bigints and hand off in order`, async () => {
    const { a, b } = await twoClientsContend(db.url, 'orders/42')

    const held = await a.lock('orders/42').acquire()
    assert.equal(await b.lock('orders/42').tryAcquire(), null)
    const status = await b.status('orders/42')
    assert.equal(status.fencingToken, held.fencingToken)
    assert.equal(db.query("SELECT fence FROM dlock_lock WHERE name = 'orders/42'"), String(held.fencingToken))
    await held.release()
    assert.equal((await b.status('orders/42')).owner, null)
    await a.close()
    await b.close()
  })

  test(`what SQL does not offer is refused with a typed error on ${kind}`, async () => {
    const client = await connect(db.url)
    await assert.rejects(client.semaphore('s', { permits: 2 }).acquire(), (e) => e.code === 'DLOCK_INVALID_ARGUMENT')
    await client.close()
  })
}
