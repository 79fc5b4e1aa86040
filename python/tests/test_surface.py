"""The host surface as a newcomer meets it: secrets never printed, error codes, lost reasons,
``dlock.aio`` after ``import dlock``, and locks as decorators."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
import traceback
from typing import List

import pytest
from conftest import RedisServer, free_port

import dlock

PASSWORD = "s3cret"  # the redis_acl fixture's


def _shown(exc: BaseException) -> str:
    """Everything Python would print of an exception: str, repr, traceback, args."""
    return "\n".join([str(exc), repr(exc), "".join(traceback.format_exception(exc)), repr(exc.args)])


def test_no_password_in_any_error_repr_or_log(redis_acl: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    port, closed = redis_acl.port, free_port()
    failing = [
        f"redis://alice:{PASSWORD}@",
        f"redis://alice:{PASSWORD}@127.0.0.1:99999",
        f"redis://alice:{PASSWORD}@127.0.0.1:{closed}",
        f"redis://alice:wrong{PASSWORD}@127.0.0.1:{port}",
        f"redlock://alice:{PASSWORD}@127.0.0.1:{closed},127.0.0.1:{closed}",
        f"redis-cluster://alice:{PASSWORD}@127.0.0.1:{closed}",
        f"zk://alice:{PASSWORD}@127.0.0.1",
        f"nope://alice:{PASSWORD}@127.0.0.1:{port}",
        f"alice:{PASSWORD}@127.0.0.1:{port}",
    ]
    seen: List[str] = []
    for url in failing:
        with pytest.raises(dlock.DlockError) as info:
            dlock.connect(url)
        seen.append(_shown(info.value))

    async def aio_errors() -> None:
        for url in failing[:4]:
            with pytest.raises(dlock.DlockError) as info:
                await dlock.aio.connect(url)
            seen.append(_shown(info.value))

    asyncio.run(aio_errors())

    url = f"redis://alice:{PASSWORD}@127.0.0.1:{port}"
    client, other = dlock.connect(url), dlock.connect(url)
    seen += [repr(client), str(client)]
    with client.lock("secret") as held:
        seen.append(repr(held))
        with pytest.raises(dlock.LockTimeout) as timeout:
            other.lock("secret", wait=0.05).acquire()
        seen.append(_shown(timeout.value))
    with pytest.raises(dlock.InvalidArgument) as bad:
        client.fenced_write("r", 0, "v")
    seen.append(_shown(bad.value))
    client.close()
    with pytest.raises(dlock.ClientClosed) as closed_error:
        client.lock("secret").acquire()
    seen.append(_shown(closed_error.value))
    seen += [record.getMessage() for record in caplog.records]
    for text in seen:
        assert PASSWORD not in text, text
    assert "alice:***@" in repr(other)
    other.close()


def test_errors_carry_their_stable_code() -> None:
    assert dlock.ERROR_CODES == ("timeout", "lost", "not-held", "invalid-argument", "backend", "closed")
    assert {cls.code for cls in dlock.errors.BY_CODE.values()} == set(dlock.ERROR_CODES)
    assert dlock.LOST_REASONS == ("expired", "not-owner", "max-hold", "closed", "disconnected", "session-expired")
    client = dlock.connect("memory://codes")
    with pytest.raises(dlock.InvalidArgument) as info:
        client.lock("").acquire()
    assert info.value.code == "invalid-argument"
    held = client.lock("codes").acquire()
    with pytest.raises(dlock.LockTimeout) as timeout:
        client.lock("codes", wait=0.01).acquire()
    assert timeout.value.code == "timeout" and isinstance(timeout.value, TimeoutError)
    held.release()
    with pytest.raises(dlock.NotHeld) as again:
        held.release()
    assert again.value.code == "not-held"
    for bad in (True, 1.5, "7"):
        with pytest.raises(dlock.InvalidArgument):
            client.fenced_write("r", bad, "v")  # type: ignore[arg-type]
    with pytest.raises(dlock.InvalidArgument):
        client.fenced_write("r", 2**64, "v")
    client.close()


def test_aio_is_reachable_after_import_dlock_without_loading_asyncio() -> None:
    code = (
        "import sys, dlock\n"
        "assert 'asyncio' not in sys.modules, 'import dlock loaded asyncio'\n"
        "assert 'dlock.aio' not in sys.modules\n"
        "import asyncio\n"
        "async def main():\n"
        "    client = await dlock.aio.connect('memory://lazy')\n"
        "    async with client.lock('x') as held:\n"
        "        print(held.fencing_token)\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 1
    with pytest.raises(AttributeError):
        dlock.no_such_thing  # type: ignore[attr-defined]  # noqa: B018


def test_a_lock_decorates_plain_and_async_functions() -> None:
    client = dlock.connect("memory://decorator")
    inside, overlaps = [0], []
    gate = threading.Lock()

    @client.lock("nightly", lease=5.0)
    def job(n: int) -> int:
        with gate:
            inside[0] += 1
            overlaps.append(inside[0])
        status = client.status("nightly")
        with gate:
            inside[0] -= 1
        assert status.owner is not None, "held while the function runs"
        return n * 2

    threads = [threading.Thread(target=job, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(overlaps) == 1 and job(21) == 42 and job.__name__ == "job"
    assert client.status("nightly").owner is None, "released after each call"

    busy = client.lock("busy").acquire()

    @client.lock("busy", wait=0)
    def never() -> None:
        raise AssertionError("ran without the lock")

    with pytest.raises(dlock.LockTimeout):
        never()
    busy.release()

    @client.lock("coro")
    async def work(x: int) -> int:
        assert client.status("coro").owner is not None
        await asyncio.sleep(0)
        return x + 1

    assert asyncio.run(work(1)) == 2
    assert client.status("coro").owner is None

    async def with_aio() -> None:
        aclient = await dlock.aio.connect("memory://decorator")

        @aclient.lock("coro")
        async def task(x: int) -> int:
            assert (await aclient.status("coro")).owner is not None
            return x * 3

        assert await asyncio.gather(task(1), task(2)) == [3, 6]
        assert (await aclient.status("coro")).owner is None
        with pytest.raises(TypeError):
            aclient.lock("coro")(lambda: None)
        await aclient.close()

    asyncio.run(with_aio())
    client.close()
