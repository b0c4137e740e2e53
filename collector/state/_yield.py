"""How reads of the state give way to ingest: a long read calls ``pause()`` between stages
(every ``PAUSE_EVERY_RANKS`` ranks; :func:`no_pause` for a read that does not give way), and
:class:`LoadMeter` measures the CPU the collector spends outside scrapes, which the scrape
pacing (``export/_scrape_pacing.py``) sizes its sleeps by."""

from __future__ import annotations

import threading
import time

__all__ = ["LoadMeter", "no_pause", "PAUSE_EVERY_RANKS"]

PAUSE_EVERY_RANKS = 2048  # a long scrape stage pauses after this many ranks (~30 ms on the 2-core machine)


def no_pause() -> None:
    """The ``pause`` of a render that does not give way (tests, ``/api``)."""


class LoadMeter:
    """CPU share of a core the collector spent outside scrapes over the last ``window_s``.

    ``sample()`` runs on the event loop (every loop-watch tick); ``add_render`` runs on the
    scrape thread. ``share`` is read anywhere (a float, replaced whole). ``last_scrape_s``: the
    thread CPU of the last scrape rendered on the thread (what the next one expects)."""

    def __init__(self, window_s: float = 1.0, clock=time.monotonic, cpu=time.process_time):
        self.window_s, self._clock, self._cpu = window_s, clock, cpu
        self.share = 0.0
        self.last_scrape_s = 0.0
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
