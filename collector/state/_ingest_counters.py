"""What ingest saw of the agents' messages before and while they reached rank state: streams
accepted and refused, connections that could not be accepted, messages that did not decode,
batches received, resent or refused for their sequence number, records dropped for a non-finite
number or a far time, strings and window names cut to their bounds, and the records the agents
say they dropped themselves. Owned by the :class:`~stepwatch.collector.ingest.Pipeline` (the
gRPC server and the accept guard count into the live one). It declares its own metric families
(:meth:`IngestCounters.families`: names, help, labels, values); the export only renders them.
Any thread; each count takes one lock."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["IngestCounters", "REJECT_REASONS"]

REJECT_REASONS = ("unauthenticated", "no_hello", "invalid_hello", "malformed", "too_many_jobs", "too_many_ranks")

# count -> (metric family name, help); all counters
_PLAIN = {
    "streams_accepted": ("stepwatch_collector_streams", "Agent streams accepted (valid Hello)."),
    "batches_received": ("stepwatch_collector_batches_received", "Batches received from agents, duplicates included."),
    "batches_duplicate": ("stepwatch_collector_batches_duplicate",
                          "Batches received again (already applied), acked and ignored."),
    "batches_seq_refused": ("stepwatch_collector_batches_seq_refused",
                            "Batches whose sequence number jumped far ahead or near the top of its range (damage "
                            "that still decodes): acked so the agent drops them, not applied."),
    "decode_errors": ("stepwatch_collector_decode_errors", "Agent messages that failed protobuf decoding."),
    "nonfinite_records": ("stepwatch_collector_nonfinite_records",
                          "Agent records dropped at ingest for a NaN or infinite number."),
    "far_records": ("stepwatch_collector_far_records", "Agent steps and samples dropped at ingest: time more than "
                    "a day from the collector's clock, or a step number beyond 1e12."),
    "out_of_range_fields": ("stepwatch_collector_out_of_range_fields",
                            "Agent sample counters cleared at ingest: above 2^63 - 1 (the sample's other "
                            "values kept)."),
    "records_dropped": ("stepwatch_collector_records_dropped",
                        "Records dropped by agents, summed over all agents seen."),
}
# by-reason table -> (metric family name, help, label)
_BY = {
    "streams_rejected": ("stepwatch_collector_streams_rejected", "Agent streams rejected, by reason.", "reason"),
    "accepts_failed": ("stepwatch_collector_accepts_failed", "New connections (gRPC or HTTP) the collector could "
                       "not accept, by reason: fd_exhausted (no file descriptor left), no_memory.", "reason"),
    "trimmed": ("stepwatch_collector_trimmed", "Agent data cut to the collector's bounds, by what: string (a "
                "string over its bound or a map entry over its count, collector/wire/_bounds.py), window_names "
                "(a window's kernel/op list over 50 entries).", "what"),
}


class IngestCounters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._n = {"streams_accepted": 0, "batches_received": 0, "batches_duplicate": 0, "batches_seq_refused": 0,
                   "decode_errors": 0, "nonfinite_records": 0, "far_records": 0, "out_of_range_fields": 0, "records_dropped": 0}
        self._by = {"streams_rejected": dict.fromkeys(REJECT_REASONS, 0),
                    "trimmed": {"string": 0, "window_names": 0},
                    "accepts_failed": {"fd_exhausted": 0, "no_memory": 0}}

    def add(self, what: str, n: int = 1) -> None:
        """Count ``n`` more of ``what`` (a key of :meth:`snapshot` holding a number)."""
        if n:
            with self._lock:
                self._n[what] += n

    def add_by(self, what: str, reason: str, n: int = 1) -> None:
        """Count ``n`` more of ``what`` (``streams_rejected``, ``trimmed``, ``accepts_failed``)
        for ``reason``."""
        if n:
            with self._lock:
                by = self._by[what]
                by[reason] = by.get(reason, 0) + n

    def reject(self, reason: str) -> None:
        self.add_by("streams_rejected", reason)

    def accept_failed(self, reason: str) -> None:
        self.add_by("accepts_failed", reason)

    def __getitem__(self, what: str) -> Any:
        """One count, or a copy of one by-reason table."""
        with self._lock:
            return self._n[what] if what in self._n else dict(self._by[what])

    def snapshot(self) -> dict[str, Any]:
        """Every count, the by-reason tables as copies."""
        with self._lock:
            return {**self._n, **{k: dict(v) for k, v in self._by.items()}}

    def families(self) -> list[tuple]:
        """Its metric families, all counters, in the collector's declared form ``(name, help,
        kind, [(label names, label values, value), ...])``; the by-reason ones sorted by reason."""
        c = self.snapshot()
        out = [(name, doc, "counter", [((), (), c[what])]) for what, (name, doc) in _PLAIN.items()]
        out += [(name, doc, "counter", [((label,), (k,), n) for k, n in sorted(c[what].items())])
                for what, (name, doc, label) in _BY.items()]
        return out
