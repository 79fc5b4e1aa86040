"""dlock for asyncio::

    import dlock

    client = await dlock.aio.connect("redis://127.0.0.1:6379")
    async with client.lock("orders/42", lease=10.0, wait=5.0) as held:
        await write(fence=held.fencing_token)

The same classes' behaviour as :mod:`dlock` (one implementation, in ``dlock._api``); here the
native calls run on the event loop instead of blocking. Waiting never blocks the event loop;
cancelling a task that waits for a lock takes it out of the queue.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import weakref
from types import TracebackType
from typing import Any, Callable, List, Optional, Type, TypeVar, cast

from . import _api
from ._api import Leader, LockStats, LockStatus, OnLost
from ._dlock import DEFAULT_LEASE, Call, NativeClient, NativeHeld, NativeObserver, new_owner
from .errors import ClientClosed, LockLost

__all__ = [
    "AsyncClient",
    "AsyncElection",
    "AsyncHeld",
    "AsyncLeadership",
    "AsyncLock",
    "AsyncMultiLock",
    "AsyncObserver",
    "AsyncRwLock",
    "AsyncSemaphore",
    "connect",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def _ignore(ok: bool, value: Any) -> None:
    pass


def _give_back(ok: bool, value: Any) -> None:
    """A lock granted to nobody (its waiter was cancelled meanwhile) is released."""
    if ok and isinstance(value, NativeHeld):
        value.release().then(_ignore)


async def _run(call: "Call[T]") -> T:
    """Runs a native call on the runtime as a cancellable awaitable."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if future.cancelled():
            _give_back(ok, value)
        elif ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def done(ok: bool, value: Any) -> None:  # called from a dlock thread
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the loop is closed
            _give_back(ok, value)

    task = call.then(done)
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
    """Connects; see :func:`dlock.connect`."""
    options = _api.connect_options(waiter_lease, request_timeout, lock_delay)
    return AsyncClient(await _run(NativeClient.connect(url, options)), url)


class _TaskOwners:
    """One owner per task, and the holds each task's ``async with`` blocks took."""

    def __init__(self) -> None:
        self._owners: "weakref.WeakKeyDictionary[asyncio.Task[Any], int]" = weakref.WeakKeyDictionary()
        self._stacks: "weakref.WeakKeyDictionary[asyncio.Task[Any], List[AsyncHeld]]" = weakref.WeakKeyDictionary()

    def owner(self) -> int:
        task = asyncio.current_task()
        if task is None:
            return new_owner()
        owner = self._owners.get(task)
        if owner is None:
            owner = self._owners[task] = new_owner()
        return owner

    def stack(self) -> "List[AsyncHeld]":
        task = asyncio.current_task()
        assert task is not None, "async with runs in a task"
        return self._stacks.setdefault(task, [])


class AsyncHeld(_api.HeldBase):
    """A held lock; release it once (or leave its ``async with`` block)."""

    def __init__(self, native: NativeHeld, on_lost: Optional[OnLost] = None) -> None:
        super().__init__(native)
        self._watch: Optional[asyncio.Task[None]] = None
        if on_lost is not None:
            self._watch = asyncio.get_running_loop().create_task(self._call_on_lost(on_lost))

    async def _call_on_lost(self, on_lost: OnLost) -> None:
        reason = await self.wait_lost()
        if reason is not None:
            result = on_lost(self, reason)
            if inspect.isawaitable(result):
                await result

    async def extend(self, lease: float) -> None:
        """Renews now with ``lease`` seconds, which later renewals keep using."""
        await _run(self._native.extend(lease))

    async def release(self) -> None:
        """Releases the lock; see :meth:`dlock.Held.release`."""
        await _run(self._native.release())

    async def wait_lost(self) -> Optional[str]:
        """Waits until the lock is lost (the reason) or released (None)."""
        return await _run(self._native.wait_lost())

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


class _Awaiting(_api.Acquirable[AsyncHeld]):
    """Acquiring as asyncio does: on the event loop, cancellable."""

    _held_class = AsyncHeld
    _owners: _TaskOwners

    async def acquire(self) -> AsyncHeld:
        """Waits until acquired, up to ``wait`` seconds (raises :class:`dlock.LockTimeout`)."""
        return self._acquired(await _run(self.client._native.acquire(self._spec())))

    async def try_acquire(self) -> Optional[AsyncHeld]:
        """Takes it if it is free now, else returns None."""
        return self._maybe(await _run(self.client._native.try_acquire(self._spec())))

    async def __aenter__(self) -> AsyncHeld:
        held = await self.acquire()
        self._owners.stack().append(held)
        return held

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self._owners.stack().pop()._exit(exc)

    def __call__(self, fn: F) -> F:
        """Decorates the ``async def`` ``fn`` to run while holding it (each call in its task)."""
        if not inspect.iscoroutinefunction(fn):
            raise TypeError("a dlock.aio lock decorates async def functions; use dlock.connect's locks for others")

        @functools.wraps(fn)
        async def locked(*args: Any, **kwargs: Any) -> Any:
            async with self:
                return await fn(*args, **kwargs)

        return cast(F, locked)


class AsyncLock(_api.LockBase[AsyncHeld], _Awaiting):
    """One lock name with its options. Acquiring the same ``AsyncLock`` again from the same
    task while it holds is reentrant; other tasks contend normally."""


class AsyncMultiLock(_api.MultiLockBase[AsyncHeld], _Awaiting):
    """Several lock names acquired as one (see :meth:`AsyncClient.multi_lock`)."""


class AsyncSemaphore(_api.SemaphoreBase[AsyncHeld], _Awaiting):
    """A semaphore's name, number of permits and options (see :meth:`AsyncClient.semaphore`)."""


class AsyncRwLock(_api.RwLockBase[AsyncLock]):
    """A read-write lock's name (see :meth:`AsyncClient.rw_lock`); in one task, its read and
    write holds belong to one owner."""

    _lock_class = AsyncLock


class AsyncLeadership(AsyncHeld):
    """Leading an election, for one term; see :class:`dlock.Leadership`."""

    @property
    def term(self) -> int:
        """The term: the tenure's fencing token, larger than every earlier term's."""
        return self.fencing_token

    async def proclaim(self, value: str) -> None:
        """Publishes a new value under the same term."""
        await _run(self._native.proclaim(value))

    async def resign(self) -> None:
        """Steps down, for this term only; see :meth:`dlock.Leadership.resign`."""
        await self.release()

    async def __aenter__(self) -> "AsyncLeadership":
        return self


class _Campaign:
    """A campaign under way: await it for the leadership, or ``async with`` it to resign on
    leaving the block."""

    def __init__(self, election: "AsyncElection", value: str, on_lost: Optional[OnLost]) -> None:
        self._election = election
        self._value = value
        self._on_lost = on_lost
        self._lead: Optional[AsyncLeadership] = None

    async def _campaign(self) -> AsyncLeadership:
        native = await _run(self._election._campaign(self._value))
        return AsyncLeadership(native, self._on_lost)

    def __await__(self) -> Any:
        return self._campaign().__await__()

    async def __aenter__(self) -> AsyncLeadership:
        self._lead = await self._campaign()
        return self._lead

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        assert self._lead is not None
        await self._lead._exit(exc)


class AsyncObserver:
    """The changes of an election's leader, as an async iterator; see :class:`dlock.Observer`."""

    def __init__(self, native: NativeObserver) -> None:
        self._native = native

    def __aiter__(self) -> "AsyncObserver":
        return self

    async def __anext__(self) -> Optional[Leader]:
        try:
            return _api.leader(await _run(self._native.next()))
        except ClientClosed:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._native.close()

    async def __aenter__(self) -> "AsyncObserver":
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.aclose()


class AsyncElection(_api.ElectionBase):
    """An election for asyncio (see :meth:`AsyncClient.election`)."""

    def campaign(self, value: str = "", *, on_lost: Optional[OnLost] = None) -> _Campaign:
        """Waits to lead, then publishes ``value``; see :meth:`dlock.Election.campaign`::

            async with client.election("scheduler").campaign("worker-1:8080") as lead:
                await run_scheduler(fence=lead.term)
        """
        return _Campaign(self, value, on_lost)

    async def leader(self) -> Optional[Leader]:
        """The current leader, None if nobody leads."""
        return _api.leader(await _run(self.client._native.leader(self.name)))

    def observe(self) -> AsyncObserver:
        """Every change of leader, pushed::

            async for leader in client.election("scheduler").observe():
                print(leader)
        """
        return AsyncObserver(self.client._native.observe(self.name))


class AsyncClient(
    _api.ClientBase[AsyncLock, AsyncMultiLock, AsyncRwLock, AsyncSemaphore],
    primitives=(AsyncLock, AsyncMultiLock, AsyncRwLock, AsyncSemaphore),
    owners=_TaskOwners,
):
    """A connection to one lock backend for asyncio; see :class:`dlock.Client`."""

    async def status(self, name: str) -> LockStatus:
        """Who holds ``name`` now, and who waits for it."""
        return _api.status(name, await _run(self._native.status(name)))

    async def stats(self) -> "List[LockStats]":
        """See :meth:`dlock.Client.stats`."""
        return _api.stats(await _run(self._native.stats()))

    def election(self, name: str, *, lease: float = DEFAULT_LEASE, wait: Optional[float] = None) -> AsyncElection:
        """The election ``name``; see :meth:`dlock.Client.election`."""
        return AsyncElection(self, name, lease=lease, wait=wait)

    async def fenced_write(self, resource: str, token: int, value: str) -> bool:
        """See :meth:`dlock.Client.fenced_write`."""
        return await _run(self._native.fenced_write(resource, token, value))

    async def close(self) -> None:
        self._native.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.close()
