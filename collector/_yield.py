"""A scrape gives way to ingest when ingest is busy.

/metrics renders on the HTTP worker thread. Python runs one thread at a time (the GIL), and two
runnable threads get about half each: at 10,000 ranks a 2-2.6 s render left the event loop half
the core while it needed three quarters, batches queued up, and acks ran up to a second late
for several seconds after every scrape (bench/results/collector_scale_h100host_spread.md).

:class:`LoadMeter` measures the CPU the collector spent outside scrapes in the last second
(sampled on the event loop by the collector's loop watch). A scrape calls
:meth:`ScrapeYield.pause` between its stages; when ingest took more than ``IDLE_SHARE`` of a
core, the render sleeps after each stage long enough that its own share stays at about
``HEADROOM - ingest`` (never under ``MIN_SHARE``), so the loop gets what it needs and the scrape
what is left. Sleeps stop once a scrape has slept ``BUDGET_S`` in all, well inside Prometheus's
default 10 s scrape timeout. When ingest is light nothing sleeps.
"""

from __future__ import annotations

import threading
import time

__all__ = ["LoadMeter", "ScrapeYield", "no_pause", "PAUSE_EVERY_RANKS"]

IDLE_SHARE = 0.3  # ingest below this share of a core: scrapes do not yield
HEADROOM = 0.95  # ingest + render shares aimed at while ingest is busy
MIN_SHARE = 0.1  # the least share of a core a scrape keeps
BUDGET_S = 5.0  # the most a scrape sleeps in all
PAUSE_EVERY_RANKS = 2048  # a long scrape stage pauses after this many ranks (~30 ms on the 2-core machine)


def no_pause() -> None:
    """The ``pause`` of a render that does not give way (tests, ``/api``)."""


class LoadMeter:
    """CPU share of a core the collector spent outside scrapes over the last ``window_s``.

    ``sample()`` runs on the event loop (every loop-watch tick); ``add_render`` runs on the
    scrape thread. ``share`` is read anywhere (a float, replaced whole)."""

    def __init__(self, window_s: float = 1.0, clock=time.monotonic, cpu=time.process_time):
        self.window_s, self._clock, self._cpu = window_s, clock, cpu
        self.share = 0.0
        self._render = 0.0  # CPU seconds rendering scrapes, all threads, since start
        self._lock = threading.Lock()
        self._mark = (clock(), cpu(), 0.0)

    def add_render(self, cpu_s: float) -> None:
        with self._lock:
            self._render += cpu_s

    def sample(self) -> None:
        now, cpu = self._clock(), self._cpu()
        with self._lock:
            render = self._render
        t0, cpu0, render0 = self._mark
        if now - t0 >= self.window_s:
            self.share = max(0.0, (cpu - cpu0) - (render - render0)) / (now - t0)
            self._mark = (now, cpu, render)


class ScrapeYield:
    """One scrape's pacing: ``pause()`` between stages (on the scrape's own thread)."""

    def __init__(self, meter: LoadMeter, sleep=time.sleep, thread_cpu=time.thread_time):
        self._meter, self._sleep, self._thread_cpu = meter, sleep, thread_cpu
        self._last = thread_cpu()
        self.slept = 0.0

    def pause(self) -> None:
        cpu = self._thread_cpu()
        used, self._last = cpu - self._last, cpu
        self._meter.add_render(used)
        busy = self._meter.share
        if busy <= IDLE_SHARE or self.slept >= BUDGET_S or used <= 0:
            return
        share = max(MIN_SHARE, HEADROOM - busy)
        nap = min(BUDGET_S - self.slept, used * (1.0 - share) / share)
        self.slept += nap
        self._sleep(nap)
        self._last = self._thread_cpu()

    def done(self) -> None:
        """Count the render CPU since the last pause."""
        cpu = self._thread_cpu()
        self._meter.add_render(cpu - self._last)
        self._last = cpu
