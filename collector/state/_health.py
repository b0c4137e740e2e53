"""The collector process's own health, kept apart from the ranks' state: how late the event loop
runs (what every ack waits on top of its own work), each housekeeping tick, the CPU ingest uses
(scrapes give way to it), the seconds scrapes slept doing so, the render process of /metrics,
the batch interval acknowledgements ask agents for, and what ingest counted (``ingest``). Written by the collector's parts that
measure each (the loop watch, housekeeping, the scrape handler, ingest), read by the export."""

from __future__ import annotations

from typing import Any, Optional

from ._ingest_counters import IngestCounters
from ._state import SELF_BOUNDS_S, Histogram
from ._yield import LoadMeter

__all__ = ["CollectorHealth"]


class CollectorHealth:
    def __init__(self) -> None:
        self.ingest = IngestCounters()  # counted by the Pipeline, the gRPC server and the accept guard
        self.batch_interval_ask_s = 0.0  # the batch interval acks ask agents for (IngestServer; 0: none)
        self.loop_lag = Histogram(SELF_BOUNDS_S)  # how late a LOOP_WATCH_S timer ran
        self.housekeeping = Histogram(SELF_BOUNDS_S)  # each housekeeping tick
        self.load = LoadMeter()  # CPU outside scrapes (sampled by the loop watch; scrapes yield to it)
        self.scrape_yield_s = 0.0  # seconds scrapes slept giving way to ingest
        self.scrape_child: Optional[Any] = None  # the ForkRender of /metrics, when scrapes render in a child
