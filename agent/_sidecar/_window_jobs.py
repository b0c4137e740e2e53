"""Profiler windows and captured traces handed over by the trainer: the sidecar's side.

:class:`WindowJobs` analyses window traces on the "stepwatch-windows" thread (one at a time,
at most ``MAX_WAITING`` waiting; beyond that the oldest waiting window is dropped and counted
as window skip "analysis_backlog"); :class:`TraceJobs` archives captures on the
"stepwatch-traces" thread. Both delete the trainer's exported file in every outcome.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable, Optional

from stepwatch.proto.stepwatch.v1 import agent_pb2

from stepwatch.core import contract
from ._analysis import summarize
from ._backchannel import BackChannel
from ._batcher import Batcher
from ._log import LOG, OnceLog
from ._records import TraceJob, WindowJob
from ._traces import TraceArchive
from ._upload import TraceUploader
from ._worker import Worker

__all__ = ["MAX_WAITING", "TraceJobs", "WindowJobs"]

MAX_WAITING = 2
BACKLOG = "analysis_backlog"


class WindowJobs:
    """Takes "window" records (reader thread) and turns each trace into a WindowSummary in the
    next batch, plus a ``window_result`` message on the back channel. A discarded (warm-up)
    window's file is deleted at once. A trace that cannot be read or analysed becomes one
    Event "window_analysis_failed" with the reason. ``analyse`` is a seam for tests."""

    def __init__(self, batcher: Batcher, channel: BackChannel, top_k: int = 10,
                 analyse: Callable[..., agent_pb2.WindowSummary] = summarize) -> None:
        self._batcher = batcher
        self._channel = channel
        self._top_k = top_k
        self._analyse = analyse
        self._once = OnceLog()
        self.worker: Worker[WindowJob] = Worker("stepwatch-windows", self._handle, MAX_WAITING,
                                                self._drop)

    def start(self) -> None:
        self.worker.start()

    def submit(self, job: WindowJob) -> None:
        """Reader thread: queue the window, or delete its file when it is to be discarded."""
        if job.discard:
            _remove(job.path)
        else:
            self.worker.submit(job)

    def stop(self, deadline: float) -> bool:
        return self.worker.stop(deadline)

    def _drop(self, job: WindowJob) -> None:
        _remove(job.path)
        self._batcher.count_window_skip(BACKLOG)
        self._once.log(logging.WARNING, BACKLOG, "window analysis falls behind: window %d "
                       "dropped (counted as window skip %r)", job.summary.window_id, BACKLOG)

    def _handle(self, job: WindowJob) -> None:
        """Worker thread."""
        summary = agent_pb2.WindowSummary()
        steps = max(job.summary.last_step - job.summary.first_step + 1, 1)
        try:
            size = os.path.getsize(job.path)
            summary = self._analyse(job.path, top_k=self._top_k, steps=steps)
        except Exception as exc:  # any bad trace is an event, never a dead worker
            reason = f"window {job.summary.window_id}: {type(exc).__name__}: {exc}"[:500]
            self._batcher.event("window_analysis_failed", reason)
            self._once.log(logging.WARNING, ("failed", type(exc)), "window analysis failed: %s",
                           reason)
            return
        finally:
            _remove(job.path)
        summary.MergeFrom(job.summary)
        summary.trace_bytes = size
        self._batcher.add("window", summary)
        self._channel.send(contract.window_result(summary.window_id, summary.gpu_event_count))


class TraceJobs:
    """Takes "trace" records (reader thread) and archives them on a worker thread; each one
    becomes a TraceRef in the next batch (an error TraceRef when it failed or was dropped)."""

    def __init__(self, batcher: Batcher, archive: TraceArchive, max_waiting: int = 16,
                 uploader: Optional[TraceUploader] = None) -> None:
        self._batcher = batcher
        self.archive = archive
        self.uploader = uploader  # None: traces stay on this node only
        self.worker: Worker[TraceJob] = Worker("stepwatch-traces", self._handle, max_waiting,
                                               self._drop)

    def start(self) -> None:
        self.worker.start()

    def submit(self, job: TraceJob) -> None:
        self.worker.submit(job)

    def stop(self, deadline: float) -> bool:
        if self.uploader is not None:
            self.uploader.stop.set()  # no more retries; a running upload ends with its stream
        return self.worker.stop(deadline)

    def _handle(self, job: TraceJob) -> None:
        began = time.monotonic()
        ref = self.archive.store(job)
        if self.uploader is not None and ref.path:
            self.uploader.upload(ref)
        self._batcher.add("trace", ref)
        LOG.info("trace %s: %s (%.2f s)", job.request_id, ref.path or ref.error,
                 time.monotonic() - began)

    def _drop(self, job: TraceJob) -> None:
        _remove(job.path)
        self._batcher.add("trace", agent_pb2.TraceRef(
            request_id=job.request_id, first_step=job.first_step, last_step=job.last_step,
            error="dropped: the sidecar could not archive it in time"))


def _remove(path: str) -> None:
    if path:
        try:
            os.remove(path)
        except OSError:
            pass
