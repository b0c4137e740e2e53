"""A named daemon thread working through a small queue, one item at a time."""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable, Generic, TypeVar

from ._service import Service

__all__ = ["Worker"]

T = TypeVar("T")


class Worker(Service, Generic[T]):
    """Calls ``handle(item)`` on its own thread for each submitted item, in order.

    At most ``max_waiting`` items wait (the one being handled not counted); submitting one
    more drops the oldest waiting item and passes it to ``on_drop`` (on the submitting
    thread). Anything ``handle`` lets escape is logged once per exception type and the worker
    carries on. :meth:`stop` lets the queue drain until the deadline, then passes what is left
    to ``on_drop``.
    """

    def __init__(self, name: str, handle: Callable[[T], None], max_waiting: int,
                 on_drop: Callable[[T], None]) -> None:
        super().__init__(name)
        self._handle = handle
        self._on_drop = on_drop
        self._queue: collections.deque = collections.deque()
        self._max_waiting = max_waiting
        self._cond = threading.Condition()
        self._busy = False

    def submit(self, item: T) -> None:
        """Queue ``item`` (any thread, never blocks). After :meth:`stop`, drops it."""
        dropped = []
        with self._cond:
            if self.stopping:
                dropped.append(item)
            else:
                self._queue.append(item)
                while len(self._queue) > self._max_waiting:
                    dropped.append(self._queue.popleft())
                self._cond.notify()
        for old in dropped:
            self._on_drop(old)

    def idle(self) -> bool:
        """True when nothing is queued or being handled."""
        with self._cond:
            return not self._queue and not self._busy

    def stop(self, deadline: float) -> bool:
        """Stop taking items; handle what is queued until ``deadline`` (monotonic), drop the
        rest. Returns True when everything was handled. Idempotent."""
        with self._cond:
            self._stopping.set()
            self._cond.notify()
            while (self._queue or self._busy) and self._thread.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            rest, self._queue = list(self._queue), collections.deque()
        for item in rest:
            self._on_drop(item)
        return not rest and not self._busy

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self.stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                item = self._queue.popleft()
                self._busy = True
            try:
                self.guarded(self._handle, item)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
