"""Uploading captured traces to the collector (AgentService.UploadTrace), on the trace worker
thread: the trainer never waits for it.

The archived ``.json.gz`` goes in chunks of 1 MiB, the first naming job, rank, request id and
size. An attempt that fails for a transient reason (collector down or busy) is retried up to
``attempts`` times with backoff; a refusal (too large, unauthenticated, not gzip) is final.
The outcome lands in the TraceRef: ``trace_id`` on success, ``upload_error`` otherwise.
"""

from __future__ import annotations

import os
import threading
from typing import Iterator, Optional

import grpc

from stepwatch.proto.stepwatch.v1 import agent_pb2

from stepwatch.core.placement import Placement
from stepwatch.core.support import collector_channel
from ._log import LOG

__all__ = ["TraceUploader"]

_UPLOAD = "/stepwatch.v1.AgentService/UploadTrace"
_CHUNK = 1 << 20
_RETRY = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED,
          grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)


class TraceUploader:
    def __init__(self, target: str, token: str, job: str, rank: int, *, tls: Optional[dict] = None, attempts: int = 4,
                 timeout_s: float = 300.0, first_delay_s: float = 1.0,
                 stop: Optional[threading.Event] = None) -> None:
        self.target, self.job, self.rank = target, job, rank
        self._placement = Placement(target)
        self._tls = tls or {}
        self._metadata = [("authorization", "Bearer " + token)] if token else None
        self.attempts, self.timeout_s, self.first_delay_s = attempts, timeout_s, first_delay_s
        self.stop = stop or threading.Event()

    def upload(self, ref: agent_pb2.TraceRef) -> None:
        """Upload ``ref.path``; sets ``ref.trace_id`` or ``ref.upload_error``. Never raises."""
        delay, error = self.first_delay_s, ""
        for attempt in range(self.attempts):
            if attempt and self.stop.wait(delay):
                error = f"{error} (sidecar stopping)"
                break
            delay *= 2
            try:
                stored = self._once(ref)
                ref.trace_id = stored.trace_id
                LOG.info("trace %s uploaded as %s (%d bytes)", ref.request_id, stored.trace_id, stored.bytes)
                return
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                error = f"{getattr(code, 'name', code)}: {exc.details() if hasattr(exc, 'details') else exc}"
                if code not in _RETRY:
                    break
            except OSError as exc:
                error = f"cannot read the trace: {exc.strerror or exc}"
                break
        ref.upload_error = f"upload failed: {error}"[:500]
        LOG.warning("trace %s: %s", ref.request_id, ref.upload_error)

    def _once(self, ref: agent_pb2.TraceRef) -> agent_pb2.TraceStored:
        size = os.path.getsize(ref.path)
        target = self._placement.choose(self.job)  # the job's replica, where its trace was asked
        with open(ref.path, "rb") as fh, collector_channel(target, **self._tls) as channel:
            call = channel.stream_unary(_UPLOAD, request_serializer=agent_pb2.TraceChunk.SerializeToString,
                                        response_deserializer=agent_pb2.TraceStored.FromString)
            return call(self._chunks(fh, ref.request_id, size), timeout=self.timeout_s,
                        metadata=self._metadata)

    def _chunks(self, fh, request_id: str, size: int) -> Iterator[agent_pb2.TraceChunk]:
        yield agent_pb2.TraceChunk(job=self.job, rank=self.rank, request_id=request_id, total_bytes=size,
                                   data=fh.read(_CHUNK))
        while not self.stop.is_set():
            data = fh.read(_CHUNK)
            if not data:
                return
            yield agent_pb2.TraceChunk(data=data)
