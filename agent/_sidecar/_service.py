"""The one service base of the sidecar's parts: a named daemon thread with start / stop / join.

Every part (samplers, workers, back channel, reader, sender, flusher) derives from
:class:`Service`: ``start()`` starts the thread, ``stop(deadline)`` asks it to finish by the
monotonic time ``deadline`` (a part with work queued drains it until then) and joins it,
``join(deadline)`` waits. ``stop`` is idempotent and never raises. The loop body runs through
:meth:`Service.guarded`, so an exception is logged once per kind and the loop goes on; the
host process is never brought down by a part.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional

from ._log import LOG, OnceLog

__all__ = ["Service", "PeriodicService", "remaining"]


def remaining(deadline: float) -> float:
    """Seconds left until the monotonic ``deadline`` (never negative)."""
    return max(0.0, deadline - time.monotonic())


class Service:
    """Base of the sidecar's threads. Subclasses implement :meth:`_run` (the thread body) and
    may override :meth:`_wake` to interrupt a wait when :meth:`stop` is called."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stopping = threading.Event()
        self._once = OnceLog()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self, deadline: float) -> bool:
        """Ask the thread to finish by ``deadline`` (monotonic seconds) and join it until then;
        True when it ended. Idempotent; any thread."""
        self._stopping.set()
        self._wake()
        return self.join(deadline)

    def join(self, deadline: float) -> bool:
        if self._thread.ident is not None and self._thread.is_alive():
            self._thread.join(remaining(deadline))
        return not self._thread.is_alive()

    def guarded(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``; an exception is logged once per type for this service and gives None."""
        try:
            return fn(*args)
        except Exception as exc:  # the loop outlives any single failure
            if self._once.log(logging.ERROR, ("guarded", type(exc)), "%s failed: %r", self.name, exc):
                LOG.debug("details", exc_info=True)
            return None

    def _wake(self) -> None:
        """Interrupt whatever the thread waits on (called by :meth:`stop`)."""

    def _main(self) -> None:
        self.guarded(self._run)

    def _run(self) -> None:
        raise NotImplementedError


class PeriodicService(Service):
    """Runs ``_setup()``, then ``_tick()`` every ``interval_s`` (``while not stop.wait(...)``),
    then ``_teardown()``. ``_setup`` returning False ends the thread at once. ``first_s``: the
    wait before the first tick (default ``interval_s``)."""

    def __init__(self, name: str, interval_s: float, first_s: Optional[float] = None) -> None:
        super().__init__(name)
        self.interval_s = interval_s
        self.first_s = interval_s if first_s is None else first_s

    def _run(self) -> None:
        if not self.guarded(self._setup):
            return
        wait = self.first_s
        while not self._stopping.wait(wait):
            self.guarded(self._tick)
            wait = self.interval_s
        self.guarded(self._teardown)

    def _setup(self) -> bool:
        return True

    def _tick(self) -> None:
        raise NotImplementedError

    def _teardown(self) -> None:
        pass
