"""Trace references by capture request: which rank wrote which trace for which request id.

``TraceBook`` keeps the last ``max_requests`` (default 100) request ids, oldest evicted first,
so memory stays bounded however many captures are asked for. Every method takes one internal
lock: ingest (event loop thread, under the state lock), the Capture handler and an HTTP
read from any thread see consistent values. Trace references are protobuf messages that are
never mutated after they are stored, so readers may share them.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Iterable, Optional

from stepwatch.proto.stepwatch.v1 import agent_pb2

__all__ = ["TraceBook", "TraceRequest", "RankRef", "MAX_REQUESTS"]

MAX_REQUESTS = 100


@dataclasses.dataclass(frozen=True)
class RankRef:
    """The trace one rank reported: its node (``host``) and the agent's reference."""

    rank: int
    host: str
    ref: agent_pb2.TraceRef


@dataclasses.dataclass
class TraceRequest:
    """One request id. ``ranks_asked`` is empty for a request this collector did not issue
    (e.g. a trace reported after a reconnect to another collector); ``time_s`` is Unix seconds."""

    request_id: str
    job: str
    steps: int = 0
    time_s: Optional[float] = None
    ranks_asked: tuple = ()
    refs: dict = dataclasses.field(default_factory=dict)  # rank -> RankRef, last report wins


class TraceBook:
    """Bounded map request id -> :class:`TraceRequest`, in insertion order."""

    def __init__(self, max_requests: int = MAX_REQUESTS):
        self._max = max_requests
        self._lock = threading.Lock()
        self._requests: "collections.OrderedDict[str, TraceRequest]" = collections.OrderedDict()

    def open(self, request_id: str, job: str, steps: int, ranks: Iterable[int], now: float) -> None:
        """Record that ``request_id`` asked ``ranks`` of ``job`` for ``steps`` steps at ``now``."""
        with self._lock:
            req = self._get(request_id, job)
            req.steps, req.time_s, req.ranks_asked = steps, now, tuple(sorted(set(ranks)))

    def add(self, job: str, rank: int, host: str, refs: Iterable[agent_pb2.TraceRef]) -> None:
        """Store the references a rank reported; references without a request id are ignored."""
        with self._lock:
            for ref in refs:
                if ref.request_id:
                    self._get(ref.request_id, job).refs[rank] = RankRef(rank, host, ref)

    def issued(self, request_id: str, job: str, rank: int) -> bool:
        """Whether this collector asked ``rank`` of ``job`` for ``request_id`` (one of the last
        ``max_requests`` requests): the only uploads it accepts."""
        with self._lock:
            req = self._requests.get(request_id)
            return req is not None and req.job == job and rank in req.ranks_asked

    def refs(self, request_id: str) -> dict:
        """``{rank: RankRef}`` reported so far for ``request_id`` (empty when unknown)."""
        with self._lock:
            req = self._requests.get(request_id)
            return dict(req.refs) if req is not None else {}

    def snapshot(self) -> list[TraceRequest]:
        """Copies of all kept requests, newest first."""
        with self._lock:
            return [dataclasses.replace(r, refs=dict(r.refs)) for r in reversed(self._requests.values())]

    def _get(self, request_id: str, job: str) -> TraceRequest:
        req = self._requests.get(request_id)
        if req is None:
            if len(self._requests) >= self._max:
                self._requests.popitem(last=False)
            req = self._requests[request_id] = TraceRequest(request_id, job)
        return req
