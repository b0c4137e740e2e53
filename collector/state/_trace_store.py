"""Uploaded traces on the collector's disk, under a size cap, served by id.

An agent uploads each captured trace (AgentService.UploadTrace) so it outlives the pod or node
it was captured on. Files are ``<dir>/<trace_id>.json.gz`` where the id is
``<job>.<request_id>.rank<R>`` reduced to ``[A-Za-z0-9._-]`` (so an id is one path component
and never leaves ``dir``). A trace is written to a ``.part`` file and renamed when complete and
checked (gzip magic, size as announced), so a reader never sees a partial file. Beyond
``max_bytes`` in all, the oldest traces are removed (the newest is always kept); one trace may
not exceed ``max_trace_bytes``; at most ``max_uploads`` uploads run at once, and at most one per
trace id (a second is refused "busy" while the first runs; each upload has its own part file).

Thread-safety: one lock guards the index; file I/O of an upload runs on a worker thread
(``asyncio.to_thread``) so the event loop never waits on the disk.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
from typing import Optional

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from stepwatch.core.contract import safe_name

__all__ = ["TraceStore", "TraceStoreMetrics", "TraceRejected", "trace_id_for"]

CHUNK_BYTES = 1 << 20
_SUFFIX = ".json.gz"
_ID = re.compile(r"^[A-Za-z0-9._-]{1,300}$")
_PART = itertools.count(1)  # (next() on a count is atomic under the GIL)


class TraceRejected(Exception):
    """An upload that cannot be kept; ``code`` is "too_large", "not_gzip", "busy" or "invalid"."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def trace_id_for(job: str, request_id: str, rank: int) -> Optional[str]:
    """The id of rank ``rank``'s trace for ``request_id`` of ``job``; None when unusable."""
    j, r = safe_name(job, 120), safe_name(request_id, 120)
    if j is None or r is None or rank < 0:
        return None
    return f"{j}.{r}.rank{rank}"


class Upload:
    """One trace being written; ``write`` and ``finish`` run off the event loop."""

    def __init__(self, store: "TraceStore", trace_id: str, total: int):
        self.store, self.trace_id, self.total = store, trace_id, total
        self.path = os.path.join(store.directory, trace_id + _SUFFIX)
        self.part = f"{self.path}.{os.getpid()}.{next(_PART)}.part"
        self.size = 0
        self._fh = open(self.part, "wb")
        self._head = b""

    def write(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.store.max_trace_bytes:
            raise TraceRejected("too_large", f"trace larger than the collector's per-trace limit of "
                                f"{self.store.max_trace_bytes} bytes")
        if len(self._head) < 2:
            self._head += data[:2 - len(self._head)]
        self._fh.write(data)

    def finish(self) -> int:
        self._fh.close()
        if self._head[:2] != b"\x1f\x8b":
            raise TraceRejected("not_gzip", "trace data is not gzip (expected .json.gz bytes)")
        if self.total and self.size != self.total:
            raise TraceRejected("invalid", f"trace ended after {self.size} of {self.total} announced bytes")
        os.replace(self.part, self.path)
        self.store._added(self.trace_id, self.size)
        return self.size

    def abort(self) -> None:
        try:
            self._fh.close()
        finally:
            _remove(self.part)
            self.store._released(self.trace_id)


class TraceStore:
    def __init__(self, directory: str, max_bytes: int, max_trace_bytes: int, max_uploads: int = 4):
        self.directory = os.path.abspath(directory)
        self.max_bytes, self.max_trace_bytes, self.max_uploads = max_bytes, max_trace_bytes, max_uploads
        os.makedirs(self.directory, exist_ok=True)
        self._lock = threading.Lock()
        self._uploading: set = set()  # trace ids with an upload running (one each)
        self.stored = 0
        self.rejected: dict[str, int] = {}
        self.evicted = 0
        self._index: dict[str, tuple[float, int]] = {}  # trace id -> (mtime, bytes)
        for name in os.listdir(self.directory):
            path = os.path.join(self.directory, name)
            if name.endswith(".part"):
                _remove(path)  # a collector killed mid-upload
            elif name.endswith(_SUFFIX) and _ID.match(name[:-len(_SUFFIX)]):
                st = os.stat(path)
                self._index[name[:-len(_SUFFIX)]] = (st.st_mtime, st.st_size)
        self._enforce(keep="")

    # -- uploads --------------------------------------------------------------------------------
    def begin(self, job: str, rank: int, request_id: str, total: int) -> Upload:
        """Start an upload; TraceRejected when the name is unusable, the announced size is above
        the limit, or ``max_uploads`` uploads are already running."""
        trace_id = trace_id_for(job, request_id, rank)
        if trace_id is None or not request_id:
            self.reject("invalid")
            raise TraceRejected("invalid", "the first TraceChunk must name job, rank >= 0 and request_id")
        if total > self.max_trace_bytes:
            self.reject("too_large")
            raise TraceRejected("too_large", f"trace of {total} bytes is above the collector's per-trace "
                                f"limit of {self.max_trace_bytes} bytes")
        with self._lock:
            busy = ""
            if len(self._uploading) >= self.max_uploads:
                busy = f"{len(self._uploading)} trace uploads running; retry later"
            elif trace_id in self._uploading:
                busy = f"trace {trace_id} is being uploaded by another stream; retry once it ended"
            if busy:
                self.rejected["busy"] = self.rejected.get("busy", 0) + 1
                raise TraceRejected("busy", busy)
            self._uploading.add(trace_id)
        try:
            return Upload(self, trace_id, total)
        except OSError as exc:
            self._released(trace_id)
            self.reject("disk")
            raise TraceRejected("disk", f"cannot write the trace: {exc.strerror or exc}") from None

    def has(self, job: str, rank: int, request_id: str) -> bool:
        """Whether the trace of ``request_id`` by ``rank`` of ``job`` is stored."""
        trace_id = trace_id_for(job, request_id, rank)
        with self._lock:
            return trace_id is not None and trace_id in self._index

    def reject(self, code: str) -> None:
        with self._lock:
            self.rejected[code] = self.rejected.get(code, 0) + 1

    def _added(self, trace_id: str, size: int) -> None:
        with self._lock:
            self._uploading.discard(trace_id)
            self._index.pop(trace_id, None)
            self._index[trace_id] = (time.time(), size)
            self.stored += 1
        self._enforce(keep=trace_id)

    def _released(self, trace_id: str) -> None:
        with self._lock:
            self._uploading.discard(trace_id)

    def _enforce(self, keep: str) -> None:
        with self._lock:
            total = sum(size for _, size in self._index.values())
            for trace_id, (_, size) in sorted(self._index.items(), key=lambda kv: kv[1][0]):
                if total <= self.max_bytes:
                    break
                if trace_id == keep:
                    continue
                _remove(os.path.join(self.directory, trace_id + _SUFFIX))
                del self._index[trace_id]
                total -= size
                self.evicted += 1

    # -- reads ----------------------------------------------------------------------------------
    def path(self, trace_id: str) -> Optional[str]:
        """The file of a held trace, or None (unknown or malformed id)."""
        if not _ID.match(trace_id or ""):
            return None
        with self._lock:
            if trace_id not in self._index:
                return None
        return os.path.join(self.directory, trace_id + _SUFFIX)

    def listing(self) -> list[dict]:
        """``[{"trace_id", "bytes", "time_s"}]``, newest first."""
        with self._lock:
            items = sorted(self._index.items(), key=lambda kv: -kv[1][0])
        return [{"trace_id": t, "bytes": size, "time_s": mtime} for t, (mtime, size) in items]

    @property
    def total_bytes(self) -> int:
        with self._lock:
            return sum(size for _, size in self._index.values())


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


class TraceStoreMetrics:
    """stepwatch_collector_traces_{stored,rejected,evicted}_total and _held_bytes."""

    def __init__(self, store: TraceStore, registry):
        self._store = store
        registry.register(self)

    def describe(self) -> list:
        return []

    def collect(self):
        st = self._store
        yield CounterMetricFamily("stepwatch_collector_traces_stored", "Traces uploaded by agents and kept.",
                                  value=st.stored)
        rejected = CounterMetricFamily("stepwatch_collector_traces_rejected",
                                       "Trace uploads refused, by reason (too_large, not_gzip, busy, invalid, "
                                       "disk, not_issued: a request this collector did not send to that rank, "
                                       "exists: over a stored trace).",
                                       labels=["reason"])
        for reason, n in sorted(dict(st.rejected).items()):
            rejected.add_metric([reason], n)
        yield rejected
        yield CounterMetricFamily("stepwatch_collector_traces_evicted",
                                  "Uploaded traces removed to stay under trace_store_max_bytes.", value=st.evicted)
        yield GaugeMetricFamily("stepwatch_collector_traces_held_bytes", "Bytes of uploaded traces on disk.",
                                value=st.total_bytes)
