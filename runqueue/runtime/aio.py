"""The process's event loop for ``async def`` handlers, and how code on it
reaches the database.

One loop per process, in a daemon thread started on first use: async
handlers (and the slots that run on it, ``--slots async=500:loop``) share
it, so a thousand waiting turns are a thousand coroutines, not a thousand
threads. Nothing on the loop touches the database itself: every write an
async handler makes (``await ctx.checkpoint(...)``, tool records, events,
heartbeats) runs the same synchronous, fenced code the sync handlers run,
on a small bounded pool of threads (``DB_THREADS``), each with its own
Django connection. ``docs/decisions/sessions.md`` says why (Worker and runtime).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from django.db import close_old_connections, connection

#: Threads that run an async handler's database work (and nothing else):
#: at most this many of its writes are in flight at once, whatever the
#: number of async slots; each holds one server connection.
DB_THREADS = 8

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_db: concurrent.futures.ThreadPoolExecutor | None = None


def loop() -> asyncio.AbstractEventLoop:
    """The process's loop, running in its own thread (started on first use)."""
    global _loop, _thread
    with _lock:
        if _loop is None or _thread is None or not _thread.is_alive():
            new = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(new)
                new.call_soon(ready.set)
                new.run_forever()

            _thread = threading.Thread(target=run, name="runqueue-loop", daemon=True)
            _thread.start()
            ready.wait()
            _loop = new
        return _loop


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _db
    with _lock:
        if _db is None:
            _db = concurrent.futures.ThreadPoolExecutor(DB_THREADS, "runqueue-db")
        return _db


def _with_connection[T](fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    close_old_connections()  # CONN_MAX_AGE and health checks, as a request would
    return fn(*args, **kwargs)


async def db[T](fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run the synchronous ``fn`` on a database thread; await its result.

    If the awaiting task is cancelled meanwhile, the call still runs to its
    end (a fenced write is never cut in half); the task sees CancelledError.
    """
    future = _executor().submit(_with_connection, fn, *args, **kwargs)
    return await asyncio.wrap_future(future)


def run[T](coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Schedule ``coro`` on the loop from any other thread."""
    return asyncio.run_coroutine_threadsafe(coro, loop())


def call_soon(callback: Callable[[], object]) -> None:
    """Call ``callback`` on the loop's thread, from any thread."""
    loop().call_soon_threadsafe(callback)


async def in_thread[T](fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking call (a sync handler claimed by a slot on the loop, a
    sync tool in an async handler) in a daemon thread of its own, closing
    its connection after, and await it: the loop stays free. One thread per
    call, so at most one per slot; a daemon, so a handler that ignores its
    cancellation never keeps the process from exiting."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(value: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)  # type: ignore[arg-type]

    def call() -> None:
        try:
            value = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, value, None)
        finally:
            connection.close()

    threading.Thread(target=call, name="runqueue-sync", daemon=True).start()
    return await future


def close_connections() -> None:
    """Close every database thread's connection (a worker's shutdown): one
    task per thread, held at a barrier so that each thread takes one."""
    with _lock:
        executor = _db
    if executor is None:
        return
    barrier = threading.Barrier(DB_THREADS)

    def close() -> None:
        try:
            barrier.wait(5)
        except threading.BrokenBarrierError:
            pass
        connection.close()

    for future in [executor.submit(close) for _ in range(DB_THREADS)]:
        future.result(10)


#: is_async's answers by callable: asked twice for every run (its slot, then
#: its runtime), and inspect's answer cost ~4 us a call (timeit, a plain
#: function), a lookup here ~0.2 us. Weak: a handler registered again goes.
_known: weakref.WeakKeyDictionary[Callable[..., object], bool] = weakref.WeakKeyDictionary()


def is_async(fn: Callable[..., object]) -> bool:
    """An ``async def`` handler or tool (or a callable object whose ``__call__`` is)."""
    try:
        return _known[fn]
    except (KeyError, TypeError):  # not asked yet, or not weakly referable or hashable
        pass
    answer = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - a callable object's method
    )
    with contextlib.suppress(TypeError):
        _known[fn] = answer
    return answer
