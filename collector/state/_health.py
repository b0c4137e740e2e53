"""The collector process's own health, kept apart from the ranks' state: how late the event loop
runs (what every ack waits on top of its own work), each housekeeping tick, the CPU ingest uses
(scrapes give way to it), the seconds scrapes slept doing so, the render process of /metrics,
the batch interval acknowledgements ask agents for, and what ingest counted (``ingest``). Written by the collector's parts that
measure each (the loop watch, housekeeping, the scrape handler, ingest). Each declares its
metric families (``families()``: ``(name, help, kind, [(label names, label values, value)])``, a
histogram's value ``(cumulative [(le, count)], sum)``); the export renders them."""

from __future__ import annotations

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
        self.http_cut_off = lambda: 0  # HTTP answers cut off by the write deadline (the server's count)

    def families(self) -> list[tuple]:
        """Its own metric families, in the declared form (the ingest counters' and the render
        process's are theirs)."""
        out = [("stepwatch_collector_agent_batch_interval_ask_seconds", "Batch interval acknowledgements ask "
                "agents for (0: none; more agents connected than max_batches_per_s).", "gauge",
                [((), (), self.batch_interval_ask_s)]),
               ("stepwatch_collector_ingest_cpu_ratio", "CPU the collector spent outside scrapes in the last "
                "second, as a share of one core (scrapes give way to ingest above 0.3).", "gauge",
                [((), (), self.load.share)]),
               ("stepwatch_collector_scrape_yield_seconds", "Seconds scrapes and whole-fleet /api/jobs "
                "builds slept to give way to a busy ingest (they take that much longer).", "counter", [((), (), self.scrape_yield_s)]),
               ("stepwatch_collector_http_cut_off", "HTTP answers cut off because the client took none of "
                "their bytes for the write deadline (30 s): their connection aborted, the buffered answer freed.",
                "counter", [((), (), self.http_cut_off())])]
        for name, doc, hist in (
                ("stepwatch_collector_loop_lag_seconds", "How late the collector's event loop ran a 0.1 s "
                 "timer (sampled 10 times a second): what every ack waits on top of its own work.", self.loop_lag),
                ("stepwatch_collector_housekeeping_seconds", "Time each housekeeping tick (expiry and "
                 "time-based detection over every rank) held the event loop: its slices of 1,000 ranks "
                 "together, ingest and acks going on between them.", self.housekeeping)):
            out.append((name, doc, "histogram", [((), (), (hist.cumulative(), hist.sum))]))
        return out
