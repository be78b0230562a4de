"""Run every call of a function inside a window: plain functions, coroutine functions, generator and async
generator functions, each in the way its caller uses it (:meth:`edgeprof.session.monitoring.Monitor.measure`)."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, ContextManager, Optional


def in_window(func: Callable, window: Callable[[], ContextManager],
              returned: Optional[Callable[[Any, Any], None]] = None) -> Callable:
    """``func`` wrapped so that each call runs inside a fresh ``window()``.

    A coroutine function is awaited inside its window; a generator (or async generator) function's window spans
    its whole iteration, from the first item asked for to its end (what the consumer does between items
    included; one it never finishes ends when it is closed or collected). ``returned(win, value)``, when given,
    is called inside the window with what the window's context manager gave and the call's return value (a
    generator's: the value its ``return`` gives), before the window ends; an async generator returns nothing.
    """
    def finish(win, value):
        if returned is not None:
            returned(win, value)
        return value

    if inspect.isgeneratorfunction(func):
        @functools.wraps(func)
        def measured_generator(*args, **kwargs):
            with window() as win:
                return finish(win, (yield from func(*args, **kwargs)))

        return measured_generator
    if inspect.isasyncgenfunction(func):
        @functools.wraps(func)
        async def measured_async_generator(*args, **kwargs):
            inner = func(*args, **kwargs)
            with window():
                try:
                    sent = None
                    while True:
                        try:
                            item = await inner.asend(sent)
                        except StopAsyncIteration:
                            return
                        sent = yield item
                finally:
                    await inner.aclose()

        return measured_async_generator
    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def measured_async(*args, **kwargs):
            with window() as win:
                return finish(win, await func(*args, **kwargs))

        return measured_async

    @functools.wraps(func)
    def measured(*args, **kwargs):
        with window() as win:
            return finish(win, func(*args, **kwargs))

    return measured
