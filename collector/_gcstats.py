"""Garbage-collector pauses of the collector process, for ``/metrics``.

A full collection walks every tracked object: at 10,000 ranks about a million, half a second
on one core, during which neither ingest nor acks move. Operators need to see it (the agents'
ack latency has no other explanation), so every collection's duration is summed and its longest
kept, by generation. :func:`install` is idempotent and costs two clock reads per collection.
"""

from __future__ import annotations

import gc
import threading
import time

__all__ = ["install", "GC_STATS"]


class _GcStats:
    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self.longest = [0.0, 0.0, 0.0]
        self._started = 0.0
        self._lock = threading.Lock()
        self._installed = False

    def __call__(self, phase: str, info: dict) -> None:
        # Runs inside the collection on whichever thread triggered it (the GIL is held).
        if phase == "start":
            self._started = time.perf_counter()
            return
        gen = info.get("generation", 2)
        took = time.perf_counter() - self._started
        if 0 <= gen <= 2:
            self.seconds[gen] += took
            self.count[gen] += 1
            if took > self.longest[gen]:
                self.longest[gen] = took

    def install(self) -> None:
        with self._lock:
            if not self._installed:
                gc.callbacks.append(self)
                self._installed = True

    def rows(self) -> list[tuple[int, float, int, float]]:
        """``[(generation, seconds, collections, longest pause s)]``."""
        return [(g, self.seconds[g], self.count[g], self.longest[g]) for g in range(3)]


GC_STATS = _GcStats()


def install() -> None:
    GC_STATS.install()
