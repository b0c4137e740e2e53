"""Garbage-collector pauses of the collector process, for ``/metrics``.

A full collection walks every tracked object: at 10,000 ranks about a million, 0.5 s on the
development machine's core and 1.4-1.7 s on the lent GPU host's, during which neither ingest
nor acks move. Operators need to see it (the agents'
ack latency has no other explanation), so every collection's duration is summed and its longest
kept, by generation. :func:`install` is idempotent and costs two clock reads per collection.
"""

from __future__ import annotations

import gc
import threading
import time

__all__ = ["install", "GC_STATS", "GcFreezer", "TICK_S"]

TICK_S = 1.0  # seconds between GcFreezer ticks in the collector


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

    def families(self) -> list[tuple]:
        """Its metric families, by generation, in the collector's declared form ``(name, help,
        kind, [(label names, label values, value)])``."""
        rows = self.rows()
        return [(name, doc, kind, [(("generation",), (str(g),), row[k]) for g, *row in rows])
                for k, (name, doc, kind) in enumerate((
                    ("stepwatch_collector_gc_seconds", "Seconds the collector process spent in garbage "
                     "collections, by generation (2: full; ingest and acks wait meanwhile).", "counter"),
                    ("stepwatch_collector_gc_collections", "Garbage collections of the collector process, by "
                     "generation.", "counter"),
                    ("stepwatch_collector_gc_pause_max_seconds", "The longest garbage collection of the "
                     "collector process since it started, by generation.", "gauge")))]


GC_STATS = _GcStats()


def install() -> None:
    GC_STATS.install()


class GcFreezer:
    """Keeps full collections off the long-lived state. At 10,000 ranks the collector holds about
    a million tracked objects; each automatic full collection walked them all (1.4-1.7 s on the
    lent H100 host, 17 of them in a minute while the state grew: bench/results/
    collector_scale_h100host_gc.md), and neither ingest nor acks move meanwhile.

    Every tick (TICK_S) the young generations are collected (cheap) and everything that
    survived is frozen (``gc.freeze``: moved where collections do not look; freed as usual when
    its last reference goes, only a reference cycle among frozen objects waits). Every
    ``every_s`` everything is unfrozen and collected once (the one long pause, on /metrics as a
    generation-2 collection) and frozen again. ``every_s`` 0: Python's own schedule, nothing
    frozen. Process-wide: one collector per process uses it (``stop`` unfreezes).

    A stream leaves reference cycles behind when it ends (its tasks, context and, for a refused
    one, an exception with its frames); frozen while the stream lived, they would wait for the
    hourly collection: 20,000 connect/disconnect cycles of 1,000 ranks left the process at 292
    MB, 50 MB idle, after every rank had expired. So the full collection also comes early once
    ``churn_streams`` streams began since the last one (``tick(streams)``: the count of streams
    begun, accepted or refused), at most every ``churn_min_s`` or 20 times the last full
    collection's own duration, whichever is longer: a fleet reconnecting in a loop costs at most
    5% of the event loop in collections (bench/connection_churn.py)."""

    def __init__(self, every_s: float, clock=time.monotonic, churn_streams: int = 200,
                 churn_min_s: float = 1.0):
        self.every_s, self._clock = every_s, clock
        self.churn_streams, self.churn_min_s = churn_streams, churn_min_s
        self._last_full: float | None = None
        self._streams_at_full = 0
        self.last_freed = 0  # unreachable objects the last full collection found
        self.early = 0  # full collections brought forward by stream churn
        self.last_full_s = 0.0  # how long the last full collection took

    def tick(self, streams: int = 0) -> None:
        if not self.every_s:
            return
        now = self._clock()
        if self._last_full is None:
            self._last_full, self._streams_at_full = now, streams
        since = now - self._last_full
        churned = (streams - self._streams_at_full >= self.churn_streams
                   and since >= max(self.churn_min_s, 20 * self.last_full_s))
        if since >= self.every_s or churned:
            gc.unfreeze()
            began = time.perf_counter()
            self.last_freed = gc.collect()
            self.last_full_s = time.perf_counter() - began
            self._last_full, self._streams_at_full = now, streams
            self.early += churned and since < self.every_s
        else:
            gc.collect(1)
        gc.freeze()

    def stop(self) -> None:
        if self.every_s:
            gc.unfreeze()
