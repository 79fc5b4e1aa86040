"""dlock for asyncio::

    import dlock.aio

    client = await dlock.aio.connect("redis://127.0.0.1:6379")
    async with client.lock("orders/42", lease=10.0, wait=5.0) as held:
        await write(fence=held.fencing_token)

Waiting never blocks the event loop; cancelling a task that waits for a lock takes it out of
the queue.
"""

from __future__ import annotations

import asyncio
import weakref
from types import TracebackType
from typing import Any, Callable, Iterable, Optional, Type

from . import DEFAULT_LEASE, LockStatus, _fencing_token, _HeldState, _LockOptions, _redact, _status
from ._dlock import NativeClient, NativeHeld, Task, new_owner
from .errors import LockLost, LockTimeout

__all__ = ["AsyncClient", "AsyncHeld", "AsyncLock", "AsyncRwLock", "AsyncSemaphore", "connect"]

OnLost = Callable[["AsyncHeld", str], Any]


def _ignore(ok: bool, value: Any) -> None:
    pass


def _give_back(ok: bool, value: Any) -> None:
    """A lock granted to nobody (its waiter was cancelled meanwhile) is released."""
    if ok and isinstance(value, NativeHeld):
        value.release_async(_ignore)


async def _call(start: Callable[[Callable[[bool, Any], None]], Task]) -> Any:
    """Runs a native call that reports through a callback, as a cancellable awaitable."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if future.cancelled():
            _give_back(ok, value)
        elif ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def done(ok: bool, value: Any) -> None:  # called from a dlock runtime thread
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the loop is closed
            _give_back(ok, value)

    task = start(done)
    try:
        return await future
    except asyncio.CancelledError:
        task.cancel()
        raise


async def connect(
    url: str,
    *,
    waiter_lease: Optional[float] = None,
    request_timeout: Optional[float] = None,
    lock_delay: Optional[float] = None,
) -> "AsyncClient":
    """Connects to ``redis://…``, ``rediss://…``, ``redis-cluster://…``, ``redlock://…``, ``zk://…`` or ``memory://[name]``."""
    native = await _call(lambda done: NativeClient.connect_async(url, done, waiter_lease, request_timeout, lock_delay))
    return AsyncClient(native, url)


class AsyncClient:
    def __init__(self, native: NativeClient, url: str) -> None:
        self._native = native
        self._url = url

    def lock(
        self,
        name: str,
        *,
        lease: float = DEFAULT_LEASE,
        wait: Optional[float] = None,
        max_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
        fair: bool = True,
    ) -> "AsyncLock":
        """A lock to acquire; see :meth:`dlock.Client.lock`. ``on_lost(held, reason)`` is
        called (awaited if it is a coroutine function) on this loop if the lock is lost."""
        return AsyncLock(self, name, lease=lease, wait=wait, max_hold=max_hold, on_lost=on_lost, fair=fair)

    def multi_lock(
        self,
        names: Iterable[str],
        *,
        lease: float = DEFAULT_LEASE,
        wait: Optional[float] = None,
        max_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
    ) -> "AsyncMultiLock":
        """Several locks to acquire as one; see :meth:`dlock.Client.multi_lock`."""
        return AsyncMultiLock(self, list(names), lease=lease, wait=wait, max_hold=max_hold, on_lost=on_lost)

    def rw_lock(self, name: str) -> "AsyncRwLock":
        """A read-write lock; see :meth:`dlock.Client.rw_lock`. In one task, the read and
        write holds of one ``AsyncRwLock`` belong to one owner."""
        return AsyncRwLock(self, name)

    def semaphore(
        self,
        name: str,
        *,
        permits: int,
        lease: float = DEFAULT_LEASE,
        wait: Optional[float] = None,
        max_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
        fair: bool = True,
    ) -> "AsyncSemaphore":
        """A semaphore with ``permits`` permits; see :meth:`dlock.Client.semaphore`."""
        return AsyncSemaphore(
            self, name, permits=permits, lease=lease, wait=wait, max_hold=max_hold, on_lost=on_lost, fair=fair
        )

    async def status(self, name: str) -> LockStatus:
        raw = await asyncio.get_running_loop().run_in_executor(None, self._native.status, name)
        return _status(name, raw)

    async def fenced_write(self, resource: str, token: int, value: str) -> bool:
        """See :meth:`dlock.Client.fenced_write`."""
        return await asyncio.get_running_loop().run_in_executor(
            None, self._native.fenced_write, resource, _fencing_token(token), value
        )

    @property
    def closed(self) -> bool:
        return self._native.closed

    async def close(self) -> None:
        self._native.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"id={self._native.id}"
        return f"<dlock.aio.AsyncClient {_redact(self._url)} {state}>"


class AsyncLock(_LockOptions):
    """One lock name with its options. Acquiring the same ``AsyncLock`` again from the same
    task while it holds is reentrant; other tasks contend normally."""

    _KIND = "dlock.aio.AsyncLock"

    def __init__(
        self,
        client: AsyncClient,
        name: str,
        *,
        lease: float,
        wait: Optional[float],
        max_hold: Optional[float],
        on_lost: Optional[OnLost],
        fair: bool = True,
        permits: Optional[int] = None,
        rw: Optional[str] = None,
        owners: "Optional[weakref.WeakKeyDictionary[asyncio.Task[Any], int]]" = None,
    ) -> None:
        super().__init__(name, lease=lease, wait=wait, max_hold=max_hold, fair=fair, permits=permits, rw=rw)
        self.client = client
        self.on_lost = on_lost
        # Each task's owner; the holds of one AsyncRwLock share theirs.
        self._owners: "weakref.WeakKeyDictionary[asyncio.Task[Any], int]" = (
            weakref.WeakKeyDictionary() if owners is None else owners
        )
        self._held: "weakref.WeakKeyDictionary[asyncio.Task[Any], list[AsyncHeld]]" = weakref.WeakKeyDictionary()

    def _owner(self) -> int:
        task = asyncio.current_task()
        if task is None:
            return new_owner()
        owner = self._owners.get(task)
        if owner is None:
            owner = self._owners[task] = new_owner()
        return owner

    async def _acquire(self, wait: Optional[float]) -> Optional["AsyncHeld"]:
        owner = self._owner()
        native = await _call(
            lambda done: self.client._native.acquire_async(
                self.name, owner, self.lease, wait, self.max_hold, self.fair, self.permits, self.rw, done
            )
        )
        return None if native is None else AsyncHeld(native, self.on_lost)

    async def acquire(self) -> "AsyncHeld":
        """Waits until acquired, up to ``wait`` seconds (raises :class:`LockTimeout`)."""
        held = await self._acquire(self.wait)
        if held is None:
            raise LockTimeout(f"lock {self.name!r} is held by someone else")
        return held

    async def try_acquire(self) -> Optional["AsyncHeld"]:
        """Takes the lock if it is free now, else returns None."""
        return await self._acquire(0.0)

    async def __aenter__(self) -> "AsyncHeld":
        held = await self.acquire()
        task = asyncio.current_task()
        if task is not None:
            self._held.setdefault(task, []).append(held)
        return held

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            await self._held[task].pop()._exit(exc)

class AsyncMultiLock(AsyncLock):
    """Several lock names acquired as one (see :meth:`AsyncClient.multi_lock`)."""

    _KIND = "dlock.aio.AsyncMultiLock"

    def __init__(
        self,
        client: AsyncClient,
        names: "list[str]",
        *,
        lease: float,
        wait: Optional[float],
        max_hold: Optional[float],
        on_lost: Optional[OnLost],
    ) -> None:
        super().__init__(client, ",".join(names), lease=lease, wait=wait, max_hold=max_hold, on_lost=on_lost)
        self.names = names

    async def _acquire(self, wait: Optional[float]) -> Optional["AsyncHeld"]:
        native = await _call(
            lambda done: self.client._native.acquire_multi_async(self.names, self.lease, wait, self.max_hold, done)
        )
        return None if native is None else AsyncHeld(native, self.on_lost)


class AsyncSemaphore(AsyncLock):
    """A semaphore's name, number of permits and options (see :meth:`AsyncClient.semaphore`)."""

    _KIND = "dlock.aio.AsyncSemaphore"

    def __repr__(self) -> str:
        return f"<{self._KIND} {self.name!r} permits={self.permits} lease={self.lease}s wait={self.wait}>"


class AsyncRwLock:
    """A read-write lock's name (see :meth:`AsyncClient.rw_lock`)."""

    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client = client
        self.name = name
        self._owners: "weakref.WeakKeyDictionary[asyncio.Task[Any], int]" = weakref.WeakKeyDictionary()

    def read(
        self,
        *,
        lease: float = DEFAULT_LEASE,
        wait: Optional[float] = None,
        max_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
    ) -> AsyncLock:
        """The read hold, with options as for :meth:`AsyncClient.lock`."""
        return self._hold("read", lease, wait, max_hold, on_lost)

    def write(
        self,
        *,
        lease: float = DEFAULT_LEASE,
        wait: Optional[float] = None,
        max_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
    ) -> AsyncLock:
        """The write hold, with options as for :meth:`AsyncClient.lock`."""
        return self._hold("write", lease, wait, max_hold, on_lost)

    def _hold(
        self, rw: str, lease: float, wait: Optional[float], max_hold: Optional[float], on_lost: Optional[OnLost]
    ) -> AsyncLock:
        return AsyncLock(
            self.client,
            self.name,
            lease=lease,
            wait=wait,
            max_hold=max_hold,
            on_lost=on_lost,
            rw=rw,
            owners=self._owners,
        )

    def __repr__(self) -> str:
        return f"<dlock.aio.AsyncRwLock {self.name!r}>"


class AsyncHeld(_HeldState):
    """A held lock; release it once (or leave its ``async with`` block)."""

    _KIND = "dlock.aio.AsyncHeld"

    def __init__(self, native: NativeHeld, on_lost: Optional[OnLost] = None) -> None:
        super().__init__(native)
        self._watch: Optional[asyncio.Task[None]] = None
        if on_lost is not None:
            self._watch = asyncio.get_running_loop().create_task(self._call_on_lost(on_lost))

    async def _call_on_lost(self, on_lost: OnLost) -> None:
        reason = await self.wait_lost()
        if reason is not None:
            result = on_lost(self, reason)
            if asyncio.iscoroutine(result):
                await result

    async def extend(self, lease: float) -> None:
        await _call(lambda done: self._native.extend_async(lease, done))

    async def release(self) -> None:
        await _call(self._native.release_async)

    async def wait_lost(self) -> Optional[str]:
        """Waits until the lock is lost (the reason) or released (None)."""
        reason: Optional[str] = await _call(self._native.wait_lost_async)
        return reason

    async def _exit(self, exc: Optional[BaseException]) -> None:
        try:
            await self.release()
        except LockLost:
            if exc is None:
                raise

    async def __aenter__(self) -> "AsyncHeld":
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self._exit(exc)
