"""ConnectLog: the collector's "agent connected" / "agent disconnected" lines, rate-limited with
a count. A fleet that reconnects in a loop (1,000 agents for 5 minutes: 179,000 cycles) would
otherwise write a line per stream (269,200 INFO lines, 33 MB); here at most ``per_window`` lines
each ``window_s``, and once a window that held more has passed, one line says how many connects
and disconnects were not written one by one (written with the next event after it, or by
:meth:`flush`). The counts of every stream stay in ``stepwatch_collector_*`` metrics; this is the
log only. Called on the event loop: O(1) per event, no lock."""

from __future__ import annotations

import logging
import time
from typing import Callable

__all__ = ["ConnectLog"]


class ConnectLog:
    def __init__(self, log: logging.Logger, per_window: int = 20, window_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        self._log, self.per_window, self.window_s, self._clock = log, per_window, window_s, clock
        self._start = clock()
        self._written = 0
        self._held = {"connected": 0, "disconnected": 0}

    def connected(self, job: str, rank: int, host: str, session: str) -> None:
        if self._take("connected"):
            self._log.info("stepwatch collector: agent connected: job=%s rank=%d host=%s session=%s",
                           job, rank, host, session)

    def disconnected(self, job: str, rank: int) -> None:
        if self._take("disconnected"):
            self._log.info("stepwatch collector: agent disconnected: job=%s rank=%d", job, rank)

    def flush(self) -> None:
        """Write the count of the lines held back so far, if any (at shutdown)."""
        held = self._held
        if held["connected"] or held["disconnected"]:
            self._log.info("stepwatch collector: %d more agent connects and %d disconnects in the last "
                           "%.0f s were not logged one by one (at most %d lines a %.0f s)",
                           held["connected"], held["disconnected"], self._clock() - self._start,
                           self.per_window, self.window_s)
            held["connected"] = held["disconnected"] = 0

    def _take(self, kind: str) -> bool:
        now = self._clock()
        if now - self._start >= self.window_s:
            self.flush()
            self._start, self._written = now, 0
        if self._written < self.per_window:
            self._written += 1
            return True
        self._held[kind] += 1
        return False
