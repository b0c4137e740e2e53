"""The ``/metrics`` route: one scrape, never on the event loop. OpenMetrics when the scraper asks
for it, gzip when it accepts it (Prometheus does). The registry's families (the alert book's and
the trace store's, prometheus_client collectors with locks of their own) come first, then the
ranks' families (:class:`RankMetrics`), rendered by a forked child (``_fork_render``) or on the
HTTP worker thread, giving way to a busy ingest between stages inside the scraper's timeout
(``_scrape_pacing``)."""

from __future__ import annotations

import gzip
from typing import Mapping, Optional

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_CONTENT_TYPE
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from ..state import CollectorHealth, no_pause
from ._exposition import render
from ._fork_render import ForkRender
from ._metrics import RankMetrics
from ._scrape_pacing import ScrapeYield, scrape_timeout

__all__ = ["Scrape"]


class Scrape:
    """``scrape(headers)`` is the threaded route; ``lock``: the state's lock a forked render
    holds while it forks (None: no fork); ``accepts(header, media)``: the HTTP server's
    Accept parsing."""

    def __init__(self, registry: CollectorRegistry, ranks: RankMetrics, health: CollectorHealth,
                 fork: Optional[ForkRender], lock, accepts):
        self.registry, self.ranks, self.health, self.fork, self.lock = registry, ranks, health, fork, lock
        self._accepts = accepts

    def __call__(self, headers: Mapping[str, str]) -> tuple:
        openmetrics = self._accepts(headers.get("accept", ""), "application/openmetrics-text")
        zipped = self._accepts(headers.get("accept-encoding", ""), "gzip")
        ctype = OPENMETRICS_CONTENT_TYPE if openmetrics else CONTENT_TYPE_LATEST
        extra = ("Content-Encoding: gzip",) if zipped else ()
        small = openmetrics_latest(self.registry).removesuffix(b"# EOF\n") if openmetrics \
            else generate_latest(self.registry)

        def body(pause, frozen: bool = False) -> bytes:
            text = render(self.ranks.families(pause, frozen), openmetrics=openmetrics).encode()
            data = b"".join((small, text, b"# EOF\n" if openmetrics else b""))
            pause()
            return gzip.compress(data, 1) if zipped else data

        # (it ends inside the timeout the scraper sends: Prometheus sends its scrape_timeout)
        pacing = ScrapeYield(self.health.load, scrape_timeout(headers.get("x-prometheus-scrape-timeout-seconds")))
        # The label texts of ranks new since the last scrape first, giving way to ingest (10,000
        # new ranks are ~0.1 s; what a render process added to the cache would die with it).
        self.ranks.warm(pacing.pause)
        if self.fork is not None:
            pacing.done()
            data = self.fork.run(self.lock, lambda: body(no_pause, frozen=True))
            if data is not None:
                self.health.scrape_yield_s += pacing.slept
                return 200, ctype, data, extra
        try:
            return 200, ctype, body(pacing.pause), extra
        finally:
            pacing.done()
            self.health.scrape_yield_s += pacing.slept
