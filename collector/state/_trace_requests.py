"""Trace references by capture request: which rank wrote which trace for which request id.

``TraceBook`` keeps the last ``max_requests`` (default 100) request ids this collector issued,
oldest evicted first, so memory stays bounded however many captures are asked for. Agents
share one token, so what they report is not trusted to name a request: a reference to a request
of another job is ignored, and references to requests this collector never issued (a trace
reported after a reconnect from another collector) are kept apart, at most
``max_unissued_per_job`` (10) per job and ``max_requests`` in all, evicting only their own kind:
no agent can push out another job's pending request. Every method takes one internal
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
MAX_UNISSUED_PER_JOB = 10


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

    def __init__(self, max_requests: int = MAX_REQUESTS, max_unissued_per_job: int = MAX_UNISSUED_PER_JOB):
        self._max, self._max_unissued = max_requests, max_unissued_per_job
        self._lock = threading.Lock()
        self._requests: "collections.OrderedDict[str, TraceRequest]" = collections.OrderedDict()
        # request ids agents reported that this collector never issued, by job, oldest first
        self._unissued: "collections.OrderedDict[str, str]" = collections.OrderedDict()
        self.ignored = 0  # references refused: another job's request, or no room

    def open(self, request_id: str, job: str, steps: int, ranks: Iterable[int], now: float) -> None:
        """Record that ``request_id`` asked ``ranks`` of ``job`` for ``steps`` steps at ``now``."""
        with self._lock:
            req = self._requests.get(request_id)
            if req is None or req.job != job:
                self._drop(request_id)
                if len(self._requests) - len(self._unissued) >= self._max:
                    oldest = next(r for r in self._requests if r not in self._unissued)
                    self._drop(oldest)
                req = self._requests[request_id] = TraceRequest(request_id, job)
            self._unissued.pop(request_id, None)
            req.steps, req.time_s, req.ranks_asked = steps, now, tuple(sorted(set(ranks)))

    def add(self, job: str, rank: int, host: str, refs: Iterable[agent_pb2.TraceRef]) -> None:
        """Store the references a rank of ``job`` reported; references without a request id,
        to another job's request, or to a request not asked of this rank are ignored
        (counted in ``ignored``)."""
        with self._lock:
            for ref in refs:
                if not ref.request_id:
                    continue
                req = self._requests.get(ref.request_id)
                if req is None:
                    req = self._unissued_request(ref.request_id, job)
                elif req.job != job or (req.ranks_asked and rank not in req.ranks_asked):
                    req = None
                if req is None:
                    self.ignored += 1
                else:
                    req.refs[rank] = RankRef(rank, host, ref)

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

    def _unissued_request(self, request_id: str, job: str) -> Optional[TraceRequest]:
        """A new entry for a request id this collector never issued, evicting the job's own
        oldest such entry beyond max_unissued_per_job; None when max_requests are held."""
        mine = [r for r, j in self._unissued.items() if j == job]
        if len(mine) >= self._max_unissued:
            self._drop(mine[0])
        elif len(self._unissued) >= self._max:
            return None
        self._unissued[request_id] = job
        req = self._requests[request_id] = TraceRequest(request_id, job)
        return req

    def _drop(self, request_id: str) -> None:
        self._requests.pop(request_id, None)
        self._unissued.pop(request_id, None)
