"""The SQL backend from Python: the lock lives in the database the application already has —
PostgreSQL or MariaDB — with the same guarantees as on Redis: leases by the database's clock,
reentrancy, fencing tokens, FIFO hand-off (woken by NOTIFY on PostgreSQL, found at the
waiter's next look on MariaDB)."""

from __future__ import annotations

import asyncio
import threading
from typing import List

import psycopg

import dlock
import dlock.aio
import pytest

from conftest import MariadbServer, PostgresServer


@pytest.fixture(params=["postgres", "mariadb"])
def database_url(request: pytest.FixtureRequest) -> str:
    """The URL of a PostgreSQL, then of a MariaDB, each of the test's own."""
    server = request.getfixturevalue(request.param)
    assert isinstance(server, (PostgresServer, MariadbServer))
    return server.url


def test_threads_and_clients_exclude_each_other_with_growing_tokens(database_url: str) -> None:
    clients = [dlock.connect(database_url) for _ in range(3)]
    inside = threading.Event()
    tokens: List[int] = []
    count = [0]

    def worker(client: dlock.Client) -> None:
        for _ in range(6):
            with client.lock("counter", lease=5.0) as held:
                assert not inside.is_set(), "two holders at once"
                inside.set()
                tokens.append(held.fencing_token)
                seen = count[0]
                count[0] = seen + 1
                inside.clear()

    threads = [threading.Thread(target=worker, args=(c,)) for c in clients for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert count[0] == 36
    assert tokens == sorted(tokens) and len(set(tokens)) == 36
    assert clients[0].status("counter").owner is None


def test_reentrancy_try_acquire_and_status(database_url: str) -> None:
    a, b = dlock.connect(database_url), dlock.connect(database_url)
    job = a.lock("job")  # reentrant per lock object and thread, as threading.RLock
    with job as outer:
        with job as inner:
            assert inner.fencing_token == outer.fencing_token
            assert a.status("job").count == 2
        assert b.lock("job", wait=0).try_acquire() is None
    assert b.lock("job", wait=0).try_acquire() is not None


def test_semaphores_and_read_write_locks(database_url: str) -> None:
    a, b = dlock.connect(database_url), dlock.connect(database_url)
    first = a.semaphore("pool", permits=2).acquire()
    second = b.semaphore("pool", permits=2).acquire()
    assert a.semaphore("pool", permits=2).try_acquire() is None
    with pytest.raises(dlock.InvalidArgument, match="2 permits"):
        b.semaphore("pool", permits=3).try_acquire()
    got: List[int] = []

    def wait() -> None:
        with b.semaphore("pool", permits=2, wait=30.0) as held:
            got.append(held.fencing_token)

    waiter = threading.Thread(target=wait)
    waiter.start()
    first.release()  # queued or not yet, the waiter gets the permit given back
    waiter.join(timeout=30)
    assert got and got[0] > second.fencing_token
    second.release()

    reader = a.rw_lock("doc").read().acquire()
    other = b.rw_lock("doc").read().acquire()
    assert b.rw_lock("doc").write().try_acquire() is None, "a writer waits for the readers"
    reader.release()
    other.release()
    with b.rw_lock("doc").write() as writer:
        assert writer.fencing_token > other.fencing_token
        assert a.rw_lock("doc").read().try_acquire() is None, "a reader waits for the writer"


def test_asyncio_waiter_is_handed_the_lock(database_url: str) -> None:
    async def main() -> None:
        holder = await dlock.aio.connect(database_url)
        waiter = await dlock.aio.connect(database_url)
        held = await holder.lock("handoff", lease=60.0).acquire()
        waiting = asyncio.ensure_future(waiter.lock("handoff", lease=60.0).acquire())
        for _ in range(1000):
            if (await holder.status("handoff")).waiters:
                break
            await asyncio.sleep(0.01)
        token = held.fencing_token
        await held.release()
        got = await asyncio.wait_for(waiting, 30)
        assert got.fencing_token > token
        await got.release()
        await holder.close()
        await waiter.close()

    asyncio.run(main())


def test_fenced_update_helper_on_both_databases(postgres: PostgresServer, mariadb: MariadbServer) -> None:
    import pymysql

    import dlock.sql

    connections = [
        (postgres.url, psycopg.connect(postgres.dsn, autocommit=True)),
        (mariadb.url, pymysql.connect(host="127.0.0.1", port=mariadb.port, user="root", database="dlock", autocommit=True)),
    ]
    for url, db in connections:
        cursor = db.cursor()
        cursor.execute("CREATE TABLE stock (item varchar(40) PRIMARY KEY, quantity int NOT NULL, fence bigint NOT NULL DEFAULT 0)")
        cursor.execute("INSERT INTO stock (item, quantity) VALUES ('widget', 10)")
        old, new = dlock.connect(url), dlock.connect(url)
        stale = old.lock("stock/widget", max_hold=0.15).acquire()
        with new.lock("stock/widget", wait=10.0) as fresh:
            assert dlock.sql.fenced_update(db, "stock", {"item": "widget"}, {"quantity": 9}, fresh.fencing_token)
        assert not dlock.sql.fenced_update(db, "stock", {"item": "widget"}, {"quantity": 11}, stale.fencing_token)
        cursor.execute("SELECT quantity, fence FROM stock WHERE item = 'widget'")
        assert tuple(cursor.fetchone()) == (9, fresh.fencing_token)
        for bad in (
            lambda: dlock.sql.fenced_update(db, "stock; DROP TABLE stock", {"item": "widget"}, {"quantity": 1}, 5),
            lambda: dlock.sql.fenced_update(db, "stock", {"item": "widget"}, {"quantity = 0 --": 1}, 5),
            lambda: dlock.sql.fenced_update(db, "stock", {}, {"quantity": 1}, 5),
            lambda: dlock.sql.fenced_update(db, "stock", {"item": "widget"}, {"quantity": 1}, 0),
        ):
            with pytest.raises(dlock.InvalidArgument):
                bad()
        cursor.execute("SELECT quantity FROM stock WHERE item = 'widget'")
        assert tuple(cursor.fetchone()) == (9,), "nothing was sent"
        db.close()


# The seed's optimistic lock, fenced: the lock's fencing token doubles as the row's version.
# The update applies only under a token at least as new as the last one written, in the
# caller's own transaction; `rowcount == 0` means this holder's lock was lost meanwhile.
FENCED_UPDATE = """
    UPDATE stock SET quantity = quantity - 1, fence = %(token)s
    WHERE item = %(item)s AND fence <= %(token)s
"""


def test_fenced_update_in_the_same_database(postgres: PostgresServer) -> None:
    with psycopg.connect(postgres.dsn, autocommit=True) as db:
        db.execute("CREATE TABLE stock (item text PRIMARY KEY, quantity int NOT NULL, fence bigint NOT NULL DEFAULT 0)")
        db.execute("INSERT INTO stock (item, quantity) VALUES ('widget', 10)")
        old, new = dlock.connect(postgres.url), dlock.connect(postgres.url)
        stale = old.lock("stock/widget", max_hold=0.15).acquire()
        # The old holder is paused past its tenure; the new holder sells one.
        with new.lock("stock/widget", wait=10.0) as fresh:
            with db.transaction():
                done = db.execute(FENCED_UPDATE, {"token": fresh.fencing_token, "item": "widget"})
                assert done.rowcount == 1
        done = db.execute(FENCED_UPDATE, {"token": stale.fencing_token, "item": "widget"})
        assert done.rowcount == 0, "the stale holder must not oversell"
        row = db.execute("SELECT quantity, fence FROM stock WHERE item = 'widget'").fetchone()
        assert row == (9, fresh.fencing_token)
        # The lock's own row, as a person reads it.
        lock = db.execute("SELECT name, owner IS NULL, fence FROM dlock_lock WHERE name = 'stock/widget'").fetchone()
        assert lock == ("stock/widget", True, fresh.fencing_token)
