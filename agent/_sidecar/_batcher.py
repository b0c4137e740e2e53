"""Bounded in-memory record buffers sealed into sequenced Batch messages."""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable, Optional

from google.protobuf.message import Message

from stepwatch.proto.stepwatch.v1 import agent_pb2

__all__ = ["Batcher", "KINDS"]

# Buffer name -> Batch repeated field.
KINDS = {
    "step": "steps",
    "phase_times": "phase_times",
    "alloc": "allocator",
    "gpu_sample": "gpu_samples",
    "host": "host",
    "event": "events",
    "window": "windows",
    "trace": "traces",
}


class Batcher:
    """Collects records from any thread; :meth:`seal` turns them into the next Batch.

    Each kind of record has its own buffer of at most ``capacity`` records; when one is full
    the oldest record is dropped and counted in ``records_dropped``. Thread-safe.
    ``clock`` returns Unix seconds (a seam for tests).
    """

    def __init__(self, capacity: int = 100_000, first_seq: int = 1, stats_every_s: float = 10.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._buffers = {kind: collections.deque() for kind in KINDS}
        self._capacity = capacity
        self._next_seq = first_seq
        self._stats_every_s = stats_every_s
        self._clock = clock
        self._gpu: Optional[agent_pb2.GpuIdentity] = None
        self._trainer_stats = agent_pb2.AgentStats()
        self._own_dropped = 0
        self._own_skips: dict = {}
        self._last_sealed: Optional[float] = None

    def add(self, kind: str, msg: Message) -> None:
        """Append a record of ``kind`` (a key of :data:`KINDS`), dropping the oldest if full."""
        with self._lock:
            buf = self._buffers[kind]
            if len(buf) >= self._capacity:
                buf.popleft()
                self._own_dropped += 1
            buf.append(msg)

    def held(self, kind: str) -> int:
        """Records of ``kind`` waiting for the next batch."""
        with self._lock:
            return len(self._buffers[kind])

    def event(self, kind: str, message: str) -> None:
        """Add an Event emitted by the sidecar itself, stamped now."""
        self.add("event", agent_pb2.Event(time_s=self._clock(), kind=kind, message=message))

    def set_gpu(self, ident: agent_pb2.GpuIdentity) -> None:
        """The trainer's GPU became known or changed: carried by the next sealed batch."""
        with self._lock:
            self._gpu = ident

    def set_trainer_stats(self, records_dropped: int, hook_errors: int,
                          stats: Optional[agent_pb2.AgentStats] = None) -> None:
        """Latest cumulative counts reported by the trainer; ``stats`` adds its window counts
        (windows, window_skips, overhead_ratio)."""
        msg = agent_pb2.AgentStats()
        if stats is not None:
            msg.CopyFrom(stats)
        msg.records_dropped, msg.hook_errors = records_dropped, hook_errors
        with self._lock:
            self._trainer_stats = msg

    def count_window_skip(self, reason: str) -> None:
        """Count a window the sidecar skipped (e.g. "analysis_backlog"); reported in
        AgentStats.window_skips, added to the trainer's counts for the same reason."""
        with self._lock:
            self._own_skips[reason] = self._own_skips.get(reason, 0) + 1

    def count_dropped(self, n: int = 1) -> None:
        """Count records the sidecar lost (malformed lines, full buffers)."""
        with self._lock:
            self._own_dropped += n

    @property
    def next_seq(self) -> int:
        with self._lock:
            return self._next_seq

    def seal(self, spool_dropped: int = 0, spool_bytes: int = 0,
             force: bool = False) -> Optional[agent_pb2.Batch]:
        """Return the next Batch with everything collected since the last one, or None when
        there is nothing to send: no records, no GPU change, and stats were sent less than
        ``stats_every_s`` ago (``force`` sends stats anyway). Sequence numbers start at
        ``first_seq`` and increase by one per returned batch."""
        now = self._clock()
        with self._lock:
            empty = self._gpu is None and not any(self._buffers.values())
            stale = self._last_sealed is None or now - self._last_sealed >= self._stats_every_s
            if empty and not stale and not force:
                return None
            batch = agent_pb2.Batch(seq=self._next_seq, sealed_time_s=now)
            for kind, field in KINDS.items():
                getattr(batch, field).extend(self._buffers[kind])
                self._buffers[kind].clear()
            if self._gpu is not None:
                batch.gpu.CopyFrom(self._gpu)
                self._gpu = None
            batch.stats.CopyFrom(self._trainer_stats)
            batch.stats.records_dropped += self._own_dropped
            for reason, count in self._own_skips.items():
                batch.stats.window_skips[reason] += count
            self._next_seq += 1
            self._last_sealed = now
        batch.stats.spool_batches_dropped = spool_dropped
        batch.stats.spool_bytes = spool_bytes
        return batch
