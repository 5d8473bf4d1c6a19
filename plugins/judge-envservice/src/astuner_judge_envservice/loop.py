"""A private event loop on a daemon thread, where environment HTTP calls run.

Workflows call `gym_step()` synchronously from inside the runner's event
loop. Running the HTTP on a loop of its own makes that possible at all (a
sync call cannot wait for a coroutine of the loop it blocks), and makes a
release outlive the cancellation of the rollout that asked for it.

`call_sync()` returns a coroutine's result to synchronous code: inside an
asyncio task that has a greenback portal it suspends only that task, so the
other rollouts sharing the runner's loop go on; anywhere else it blocks
the calling thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import greenback

T = TypeVar("T")


class LoopThread:
    """`submit(coro)` runs a coroutine on this thread's loop; `stop()` ends the thread."""

    def __init__(self, name: str = "envservice-io") -> None:
        self.loop = asyncio.new_event_loop()
        self._must_finish: set[concurrent.futures.Future[Any]] = set()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` on this loop from another loop; cancelling the waiter cancels `coro`."""
        return await asyncio.wrap_future(self.submit(coro))

    def submit_to_end(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Submit work that must finish (a release): nobody can cancel it, and `drain()` waits for it."""
        future = self.submit(coro)
        self._must_finish.add(future)
        future.add_done_callback(self._must_finish.discard)
        return future

    async def run_to_end(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `submit_to_end(coro)`; a cancelled waiter leaves `coro` running to its end."""
        return await asyncio.shield(asyncio.wrap_future(self.submit_to_end(coro)))

    async def drain(self) -> None:
        """Wait until all work submitted with `submit_to_end` has finished."""
        pending = list(self._must_finish)
        if pending:
            await asyncio.wait([asyncio.wrap_future(f) for f in pending])

    def call_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` here and return its result to synchronous code (see the module docstring)."""
        future = self.submit(coro)
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        if task is not None:
            if greenback.has_portal(task):
                return greenback.await_(asyncio.wrap_future(future))
            # This call blocks the caller's loop; later calls from the same task will not.
            greenback.bestow_portal(task)
        return future.result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()
