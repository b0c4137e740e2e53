"""What ingest saw of the agents' messages before and while they reached rank state: streams
accepted and refused, connections that could not be accepted, messages that did not decode,
batches received, resent or refused for their sequence number, records dropped for a non-finite
number or a far time, strings and window names cut to their bounds, and the records the agents
say they dropped themselves. Owned by the :class:`~stepwatch.collector.ingest.Pipeline` (the
gRPC server and the accept guard count into the live one), read by the export as
``stepwatch_collector_*_total``. Any thread; each count takes one lock."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["IngestCounters", "REJECT_REASONS"]

REJECT_REASONS = ("unauthenticated", "no_hello", "invalid_hello", "malformed", "too_many_jobs", "too_many_ranks")


class IngestCounters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._n = {"streams_accepted": 0, "batches_received": 0, "batches_duplicate": 0, "batches_seq_refused": 0,
                   "decode_errors": 0, "nonfinite_records": 0, "far_records": 0, "records_dropped": 0}
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
