// The npm package on PostgreSQL and MariaDB: postgres:// and mysql:// are only other URLs.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'

import { connect, fencedUpdate } from 'dlock'
import mysql from 'mysql2/promise'
import pg from 'pg'
import { twoClientsContend } from './contention.mjs'
import { aLeaderIsObserved } from './observed.mjs'
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

  test(`fencedUpdate writes under the newer token and refuses the stale one on ${kind}`, async () => {
    db.query('CREATE TABLE stock (item VARCHAR(32) PRIMARY KEY, quantity BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)')
    db.query("INSERT INTO stock (item, quantity) VALUES ('widget', 10)")
    const client = await connect(db.url)
    const stale = await client.lock('stock/widget').acquire()
    await stale.release()
    const fresh = await client.lock('stock/widget').acquire()
    const conn = kind === 'postgres' ? new pg.Client({ connectionString: db.url }) : await mysql.createConnection(db.url)
    if (kind === 'postgres') await conn.connect()
    assert.equal(await fencedUpdate(conn, 'stock', { item: 'widget' }, { quantity: 9 }, fresh.fencingToken), true)
    assert.equal(await fencedUpdate(conn, 'stock', { item: 'widget' }, { quantity: 11 }, stale.fencingToken), false)
    assert.equal(db.query('SELECT quantity FROM stock'), '9')
    for (const bad of [
      () => fencedUpdate(conn, 'stock; DROP TABLE stock', { item: 'widget' }, { quantity: 1 }, 5n),
      () => fencedUpdate(conn, 'stock', { item: 'widget' }, { 'quantity = 0 --': 1 }, 5n),
      () => fencedUpdate(conn, 'stock', {}, { quantity: 1 }, 5n),
      () => fencedUpdate(conn, 'stock', { item: 'widget' }, { quantity: 1 }, 0n),
    ]) {
      await assert.rejects(bad(), { code: 'DLOCK_INVALID_ARGUMENT' })
    }
    assert.equal(db.query('SELECT quantity FROM stock'), '9', 'nothing was sent')
    await conn.end()
    await fresh.release()
    await client.close()
  })

  test(`semaphores and read-write locks on ${kind}`, async () => {
    const a = await connect(db.url)
    const b = await connect(db.url)
    const first = await a.semaphore('pool', { permits: 2 }).acquire()
    const second = await b.semaphore('pool', { permits: 2 }).acquire()
    assert.equal(await a.semaphore('pool', { permits: 2 }).tryAcquire(), null)
    await assert.rejects(b.semaphore('pool', { permits: 3 }).tryAcquire(), (e) => e.code === 'DLOCK_INVALID_ARGUMENT')
    const waiting = b.semaphore('pool', { permits: 2, waitMs: 30_000 }).acquire()
    await first.release() // queued or not yet, the waiter gets the permit given back
    const third = await waiting
    assert.ok(third.fencingToken > second.fencingToken)
    await Promise.all([second.release(), third.release()])

    const reader = await a.rwLock('doc').read().acquire()
    const other = await b.rwLock('doc').read().acquire()
    assert.equal(await b.rwLock('doc').write().tryAcquire(), null, 'a writer waits for the readers')
    await Promise.all([reader.release(), other.release()])
    const writer = await b.rwLock('doc').write().acquire()
    assert.ok(writer.fencingToken > other.fencingToken)
    assert.equal(await a.rwLock('doc').read().tryAcquire(), null, 'a reader waits for the writer')
    await writer.release()
    await a.close()
    await b.close()
  })

  test(`an election on ${kind}: campaign, proclaim, observe, resign`, async () => {
    await aLeaderIsObserved(db.url, 'sql/e')
    const client = await connect(db.url)
    if (kind === 'postgres') {
      await assert.rejects(client.election('e').campaign('a\0b'), { code: 'DLOCK_INVALID_ARGUMENT' })
    }
    await client.close()
  })
}
