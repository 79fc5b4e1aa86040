"""dlock: distributed locks with fencing tokens, FIFO hand-off and a lost-lock signal.

The lock semantics are one engine written in Rust, shared with the Rust crate, the Node
package and the Wasm component, so all of them contend for the same locks safely::

    import dlock

    client = dlock.connect("redis://127.0.0.1:6379")
    with client.lock("orders/42", lease=10.0, wait=5.0) as held:
        write(fence=held.fencing_token)

Durations are seconds (floats). :mod:`dlock.aio` is the same API for asyncio (reachable as
``dlock.aio`` after ``import dlock``; it is loaded on first use).

:class:`Engine` is the sans-IO engine itself, for bringing your own I/O (an existing redis-py
or kazoo connection): dicts in, dicts out, time passed in as ``time.monotonic_ns()``. Its
inputs and outputs are the JSON form described in docs/PROTOCOL.md.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import inspect
import os
import threading
from types import TracebackType
from typing import Any, Callable, List, Optional, Type, TypeVar, cast

from . import _api
from ._api import Histogram, Leader, LockStats, LockStatus, OnLost
from ._dlock import (
    DEFAULT_LEASE,
    ERROR_CODES,
    LOST_REASONS,
    Engine,
    NativeClient,
    NativeHeld,
    NativeObserver,
    _forked,
    _shutdown,
    new_owner,
)
from .errors import BackendError, ClientClosed, DlockError, InvalidArgument, LockLost, LockTimeout, NotHeld

__all__ = [
    "DEFAULT_LEASE",
    "ERROR_CODES",
    "LOST_REASONS",
    "BackendError",
    "Client",
    "ClientClosed",
    "DlockError",
    "Election",
    "Engine",
    "Held",
    "InvalidArgument",
    "Histogram",
    "Leader",
    "Leadership",
    "Lock",
    "LockLost",
    "LockStats",
    "LockStatus",
    "LockTimeout",
    "MultiLock",
    "NotHeld",
    "Observer",
    "RwLock",
    "Semaphore",
    "connect",
]

F = TypeVar("F", bound=Callable[..., Any])

# Runtime threads must be out of Python before the interpreter finalizes.
atexit.register(_shutdown)
# A forked child counts the fork: its parent's runtime and clients are not its own.
if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_forked)


def __getattr__(name: str) -> Any:
    """``dlock.aio`` after a plain ``import dlock``, without loading asyncio machinery for
    sync users until then."""
    if name == "aio":
        return importlib.import_module(".aio", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def connect(
    url: str,
    *,
    waiter_lease: Optional[float] = None,
    request_timeout: Optional[float] = None,
    lock_delay: Optional[float] = None,
) -> "Client":
    """Connects to ``redis://host:port[/db]`` (``?compat=redisson``: locks shared with Java's
    Redisson), ``rediss://…`` (TLS), ``redis-cluster://host:port[,host:port…]`` (also with
    ``?compat=redisson``),
    ``redlock://host:port,host:port[,…]`` (independent servers, locked by majority),
    ``zk://host:port[,host:port…][/chroot]`` or ``memory://[name]`` (``dlock --help`` lists
    every form).

    ``waiter_lease`` (seconds, Redis only, default 3): how long a queued waiter keeps its place
    without renewing it (it renews every third of it); never longer than the lease it waits for.

    ``request_timeout`` (seconds, default 2): a backend request with no reply after this long
    counts as failed.

    ``lock_delay`` (seconds, Redis only, default off): a lock whose holder stops renewing
    without releasing stays taken that long after its lease, so that a paused holder that
    wakes up cannot clash with a new holder; a crashed holder then blocks the lock for
    lease + lock_delay.

    Raises :class:`InvalidArgument` for a malformed URL and :class:`BackendError` when the
    backend cannot be reached. Neither message shows the URL's password.
    """
    options = _api.connect_options(waiter_lease, request_timeout, lock_delay)
    native: NativeClient = NativeClient.connect(url, options).wait()
    return Client(native, url)


class _ThreadOwners(threading.local):
    """One owner per thread, and the holds each thread's ``with`` blocks took."""

    def __init__(self) -> None:
        self._owner = new_owner()
        self.stack: "List[Held]" = []

    def owner(self) -> int:
        return self._owner


class Held(_api.HeldBase):
    """A held lock. Release it once (or leave its ``with`` block); safe to use from any thread."""

    def __init__(self, native: NativeHeld, on_lost: Optional[OnLost] = None) -> None:
        super().__init__(native)
        if on_lost is not None:
            threading.Thread(target=self._watch, args=(on_lost,), name=f"dlock-on-lost-{native.name}", daemon=True).start()

    def _watch(self, on_lost: OnLost) -> None:
        reason = self.wait_lost()
        if reason is not None:
            on_lost(self, reason)

    def extend(self, lease: float) -> None:
        """Renews now with ``lease`` seconds, which later renewals keep using."""
        self._native.extend(lease).wait()

    def release(self) -> None:
        """Releases the lock (one level of a reentrant hold). Raises :class:`LockLost` if it
        was lost meanwhile, :class:`NotHeld` if already released."""
        self._native.release().wait()

    def wait_lost(self, timeout: Optional[float] = None) -> Optional[str]:
        """Blocks until the lock is lost (returns the reason), released, or ``timeout``
        seconds pass (returns None)."""
        return self._native.wait_lost(timeout).wait()

    def _exit(self, exc: Optional[BaseException]) -> None:
        try:
            self.release()
        except LockLost:
            if exc is None:
                raise

    def __enter__(self) -> "Held":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self._exit(exc)


class _Blocking(_api.Acquirable["Held"]):
    """Acquiring as the sync API does: blocking, with the GIL released and Ctrl-C honoured."""

    _held_class = Held
    _owners: _ThreadOwners

    def acquire(self) -> "Held":
        """Blocks until acquired, up to ``wait`` seconds (raises :class:`LockTimeout`). The GIL
        is released while waiting, and Ctrl-C interrupts the wait (leaving the queue)."""
        return self._acquired(self.client._native.acquire(self._spec()).wait())

    def try_acquire(self) -> "Optional[Held]":
        """Takes it if it is free now, else returns None."""
        return self._maybe(self.client._native.try_acquire(self._spec()).wait())

    def __enter__(self) -> "Held":
        held = self.acquire()
        self._owners.stack.append(held)
        return held

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self._owners.stack.pop()._exit(exc)

    def __call__(self, fn: F) -> F:
        """Decorates ``fn`` to run while holding it; an ``async def`` waits for it in a worker
        thread, so the event loop runs on meanwhile."""
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def locked_coroutine(*args: Any, **kwargs: Any) -> Any:
                import asyncio  # loaded already: a coroutine is running

                held = await asyncio.get_running_loop().run_in_executor(None, self.acquire)
                try:
                    result = await fn(*args, **kwargs)
                except BaseException as exc:
                    held._exit(exc)
                    raise
                held._exit(None)
                return result

            return cast(F, locked_coroutine)

        @functools.wraps(fn)
        def locked(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return cast(F, locked)


class Lock(_api.LockBase["Held"], _Blocking):
    """One lock name with its options. Acquiring the same ``Lock`` again from the same thread
    while it holds is reentrant (same fencing token, one more release needed); other threads
    and other ``Lock`` objects contend normally."""


class MultiLock(_api.MultiLockBase["Held"], _Blocking):
    """Several lock names acquired as one (see :meth:`Client.multi_lock`)."""


class Semaphore(_api.SemaphoreBase["Held"], _Blocking):
    """A semaphore's name, number of permits and options (see :meth:`Client.semaphore`): each
    acquire takes a permit of its own; ``with`` releases the one it took."""


class RwLock(_api.RwLockBase[Lock]):
    """A read-write lock's name (see :meth:`Client.rw_lock`)."""

    _lock_class = Lock




class Leadership(Held):
    """Leading an election, for one term: the held lock of the election's name, whose holder
    published a value. Resign once (or leave its ``with`` block); safe to use from any thread.
    ``is_lost``, ``lost_reason`` and ``wait_lost()`` tell when it is lost — stop leading then:
    it is told when its local validity runs out, before the server could give the lock to
    the next candidate."""

    @property
    def term(self) -> int:
        """The term: the fencing token of the tenure that leads, larger than every earlier
        term's. Hand it to what the leader writes to, and have that refuse smaller ones."""
        return self.fencing_token

    def proclaim(self, value: str) -> None:
        """Publishes a new value under the same term."""
        self._native.proclaim(value).wait()

    def resign(self) -> None:
        """Steps down, for this term only: the next candidate leads at once, and observers
        hear of it. Raises :class:`LockLost` if leadership was lost meanwhile."""
        self.release()

    def __enter__(self) -> "Leadership":
        return self


class Observer:
    """The changes of an election's leader, as an iterator: the current leader first, then
    each new term or value, and None once nobody leads. Iteration blocks (the GIL released)
    until the next change; ``close()`` (or leaving its ``with`` block) stops it."""

    def __init__(self, native: NativeObserver) -> None:
        self._native = native

    def __iter__(self) -> "Observer":
        return self

    def __next__(self) -> Optional[Leader]:
        try:
            return _api.leader(self._native.next().wait())
        except ClientClosed:
            raise StopIteration from None

    def close(self) -> None:
        self._native.close()

    def __enter__(self) -> "Observer":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()


class Election(_api.ElectionBase):
    """An election (see :meth:`Client.election`)."""

    def campaign(self, value: str = "", *, on_lost: Optional[OnLost] = None) -> Leadership:
        """Blocks until this candidate leads (up to ``wait`` seconds: :class:`LockTimeout`),
        then publishes ``value`` — who it is, where to reach it — and returns the leadership.
        Candidates lead one at a time, first come, first served. ``on_lost(leadership,
        reason)`` is called once, from a thread, if leadership is lost::

            with client.election("scheduler").campaign("worker-1:8080") as lead:
                run_scheduler(fence=lead.term, stop=lead.wait_lost)
        """
        return Leadership(self._campaign(value).wait(), on_lost)

    def leader(self) -> Optional[Leader]:
        """The current leader, None if nobody leads."""
        return _api.leader(self.client._native.leader(self.name).wait())

    def observe(self) -> Observer:
        """Every change of leader, pushed: see :class:`Observer`."""
        return Observer(self.client._native.observe(self.name))


class Client(
    _api.ClientBase[Lock, MultiLock, RwLock, Semaphore],
    primitives=(Lock, MultiLock, RwLock, Semaphore),
    owners=_ThreadOwners,
):
    """A connection to one lock backend, safe to share between threads."""

    def status(self, name: str) -> LockStatus:
        """Who holds ``name`` now, and who waits for it."""
        return _api.status(name, self._native.status(name).wait())

    def stats(self) -> "List[LockStats]":
        """What this client counted about its locks, one :class:`LockStats` per lock name and
        kind: acquisitions, hand-offs, wait and hold times, renewals, losses by reason, and the
        holds and waiters of now. The engine counts them from its own clock, the same way in
        every language; :mod:`dlock.prometheus` exports them."""
        return _api.stats(self._native.stats().wait())

    def election(self, name: str, *, lease: float = DEFAULT_LEASE, wait: Optional[float] = None) -> Election:
        """The election ``name``: the lock of that name, whose holder publishes a value
        (docs/PROTOCOL.md §20). :meth:`Election.campaign` waits to lead, :meth:`Election.leader`
        reads who leads, :meth:`Election.observe` follows each change. ``lease`` is the
        leader's, renewed while it leads (a dead leader is replaced within about that long);
        ``wait`` bounds a campaign. Redis, Redis Cluster and memory://."""
        return Election(self, name, lease=lease, wait=wait)

    def fenced_write(self, resource: str, token: int, value: str) -> bool:
        """Fencing at the resource, in one call: stores ``value`` in the Redis hash
        ``resource`` (fields ``value`` and ``fence``) only if ``token`` — the fencing token of
        the lock that guards it — is at least the highest token stored there before. Returns
        False, changing nothing, for a holder whose lock was lost and taken by someone else::

            with client.lock("stock/42") as held:
                if not client.fenced_write("stock:42", held.fencing_token, "17"):
                    raise RuntimeError("lost the lock: a newer holder wrote first")
        """
        written: bool = self._native.fenced_write(resource, token, value).wait()
        return written

    def close(self) -> None:
        """Stops taking calls. Locks still held stay held until released."""
        self._native.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()
