"""Scrape pacing: a scrape (and a whole-fleet ``/api/jobs`` build) gives way to ingest when
ingest is busy.

/metrics renders on the HTTP worker thread. Python runs one thread at a time (the GIL), and two
runnable threads get about half each: at 10,000 ranks a 2-2.6 s render left the event loop half
the core while it needed three quarters, batches queued up, and acks ran up to a second late
for several seconds after every scrape (bench/results/collector_scale_h100host_spread.md).

:class:`LoadMeter` measures the CPU the collector spent outside scrapes in the last second
(sampled on the event loop by the collector's loop watch). A scrape calls
:meth:`ScrapeYield.pause` between its stages; when ingest took more than ``IDLE_SHARE`` of a
core, the render sleeps after each stage long enough that its own share stays at about
``HEADROOM - ingest`` (never under ``MIN_SHARE``), so the loop gets what it needs and the scrape
what is left. When ingest is light nothing sleeps.

A scrape has a deadline: ``DEADLINE_SHARE`` of the timeout its scraper sends
(``X-Prometheus-Scrape-Timeout-Seconds``; Prometheus and vmagent send it), else of Prometheus's
default 10 s. It sleeps as above until the time left is only what the rest of its render needs
at about half the core (``MAX_SHARE``, what it gets against a busy loop): the rest expected is
``SPARE`` times the last scrape's CPU less what it has used, and at least a quarter of what it
has used (a render past its expectation has no better guess). Then it runs to the end without
sleeping. With no scrape before to go by, sleeps stop at half the span.

Measured at 10,000-14,000 ranks on one core (bench/results/collector_scale_h100host_*.md): a
fixed sleep budget lets a long render take half the core from ingest at its end (acks up to
0.7 s late) and times out short scrape timeouts; a render share raised early makes acks late
where the deadline does not bind (p99 462 ms against 97 ms). The deadline rule above avoids both.
"""

from __future__ import annotations

import math
import time
from typing import Optional

from ..state import LoadMeter

__all__ = ["ScrapeYield", "scrape_timeout"]

IDLE_SHARE = 0.3  # ingest below this share of a core: scrapes do not yield
HEADROOM = 0.95  # ingest + render shares aimed at while ingest is busy
MIN_SHARE = 0.1  # the least share of a core a scrape keeps
MAX_SHARE = 0.5  # the share a render running without sleeps gets against a busy loop (two threads
                 # wanting the GIL get about half each)
DEADLINE_SHARE = 0.75  # of the scraper's timeout, the time a scrape may take (the rest: the
                       # registry's families, gzip, the transfer)
DEFAULT_TIMEOUT_S = 10.0  # Prometheus's default scrape_timeout, when the scraper sends none
SPARE = 1.25  # the render CPU expected: the last scrape's, times this

def scrape_timeout(raw: Optional[str]) -> Optional[float]:
    """The scraper's timeout from its ``X-Prometheus-Scrape-Timeout-Seconds`` header, or None
    when absent or not a positive finite number (the header only paces the scrape: a bad one
    falls back to the default, it does not fail the scrape)."""
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if 0.0 < value < math.inf else None


class ScrapeYield:
    """One scrape's pacing: ``pause()`` between stages (on the scrape's own thread).
    ``timeout_s``: the scraper's timeout (:func:`scrape_timeout`), None for the default."""

    def __init__(self, meter: LoadMeter, timeout_s: Optional[float] = None, sleep=time.sleep,
                 thread_cpu=time.thread_time, clock=time.monotonic, expect_s: Optional[float] = None):
        self._meter, self._sleep, self._thread_cpu, self._clock = meter, sleep, thread_cpu, clock
        span = DEADLINE_SHARE * (timeout_s or DEFAULT_TIMEOUT_S)
        self._deadline = clock() + span
        # ``expect_s``: the CPU a render of another kind took last time (a whole-fleet
        # /api/jobs build); it then leaves the scrapes' own expectation alone
        self._own = expect_s is not None
        self._expect = SPARE * (expect_s if self._own else meter.last_scrape_s)
        # with no scrape before to go by, sleeps stop at half the span (the rest is for the render)
        self._sleep_cap = span if self._expect else span / 2
        self._last = thread_cpu()
        self._used = 0.0  # render CPU so far
        self.slept = 0.0

    def pause(self) -> None:
        cpu = self._thread_cpu()
        used, self._last = cpu - self._last, cpu
        self._used += used
        self._meter.add_render(used)
        busy = self._meter.share
        if busy <= IDLE_SHARE or used <= 0:
            return
        # the CPU still to come: as expected, and at least a quarter of what it took so far
        rest = max(self._expect, SPARE * self._used) - self._used
        # time it may still sleep: what is left less the rest run at about half the core
        room = self._deadline - self._clock() - rest / MAX_SHARE
        if room <= 0 or self.slept >= self._sleep_cap:
            return
        share = max(MIN_SHARE, HEADROOM - busy)
        nap = min(room, self._sleep_cap - self.slept, used * (1.0 - share) / share)
        self.slept += nap
        self._sleep(nap)
        self._last = self._thread_cpu()

    def done(self) -> float:
        """Count the render CPU since the last pause and return the render's CPU; a scrape's is
        what the next scrape expects (with ``expect_s`` the caller keeps its own)."""
        cpu = self._thread_cpu()
        self._used += cpu - self._last
        self._meter.add_render(cpu - self._last)
        self._last = cpu
        if not self._own:
            self._meter.last_scrape_s = self._used
        return self._used
