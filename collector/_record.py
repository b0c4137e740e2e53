"""Append received step records and allocator samples to a JSONL file (``record`` option).

One JSON object per line, flushed once per batch. Called on the event loop thread for applied
(never duplicate) batches only; the writes are small and buffered, so they stay on the loop.
A write failure (disk full, file removed) logs one error and disables recording; ingest goes on.
"""

from __future__ import annotations

import json
import logging
from typing import IO, Optional

from stepwatch.proto.stepwatch.v1 import agent_pb2

__all__ = ["Recorder", "batch_lines"]

log = logging.getLogger("stepwatch.collector")

_ALLOCATOR_FIELDS = ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes",
                     "alloc_retries", "ooms", "device_total_bytes")


_CLOCKS = {agent_pb2.STEP_CLOCK_HOST: "host", agent_pb2.STEP_CLOCK_CUDA_EVENT: "cuda_event"}


def batch_lines(job: str, rank: int, session: str, batch: agent_pb2.Batch) -> list[str]:
    """The JSONL lines (without newline) for one batch: steps first, then allocator samples."""
    lines = []
    for rec in batch.steps:
        obj = {"kind": "step", "job": job, "rank": rank, "step": rec.step, "time": rec.end_time_s,
               "step_time_s": rec.duration_s}
        if rec.HasField("samples"):
            obj["samples"] = rec.samples
        if rec.HasField("tokens"):
            obj["tokens"] = rec.tokens
        obj.update(dataloader_wait_s=rec.dataloader_wait_s, clock=_CLOCKS.get(rec.clock, "unspecified"),
                   session=session, seq=batch.seq)
        lines.append(json.dumps(obj, separators=(",", ":")))
    for sample in batch.allocator:
        obj = {"kind": "allocator", "job": job, "rank": rank, "time": sample.time_s}
        obj.update((f, getattr(sample, f)) for f in _ALLOCATOR_FIELDS)
        lines.append(json.dumps(obj, separators=(",", ":")))
    return lines


class Recorder:
    """Appends to ``path`` (created if missing). ``close`` is idempotent and flushes."""

    def __init__(self, path: str):
        self.path = path
        self._fh: Optional[IO[str]] = open(path, "a", encoding="utf-8")

    def write_batch(self, job: str, rank: int, session: str, batch: agent_pb2.Batch) -> None:
        if self._fh is None:
            return
        lines = batch_lines(job, rank, session, batch)
        if not lines:
            return
        try:
            self._fh.write("\n".join(lines) + "\n")
            self._fh.flush()
        except (OSError, ValueError) as exc:
            log.error("stepwatch collector: recording to %s failed, recording disabled: %s", self.path, exc)
            self.close()

    def close(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            try:
                fh.close()
            except OSError as exc:
                log.error("stepwatch collector: closing record file %s failed: %s", self.path, exc)
