"""The collector's data flow, in one place.

    ingest (gRPC stream) --connect/batch/disconnect--> Pipeline
        -> cut window name lists to their bound, drop records with non-finite numbers or
           far times, clear sample counters above int64 (each counted)
        -> CollectorState.apply_batch (duplicates and sequence jumps stop here, counted)
        -> listeners, in order: Detection (alerting), Recorder (optional)
    housekeeping(now): expire gone ranks -> listeners forget them -> Detection.tick (live: in
        slices, the event loop acking other agents between them: housekeeping_slices)

The live collector and ``stepwatch replay`` build the same Pipeline; live, ``now`` is the
collector's clock, in replay the recording's. One caller at a time (the event loop thread, or
the replay loop). A listener is any object with some of ``on_connect(hello, now)``,
``on_batch(hello, batch, now, steps, samples)`` (``steps``, ``samples``: the batch's step
records and samples as columns, read once for everyone: collector/wire/_columns.py),
``on_disconnect(hello, now)``, ``forget(keys)`` and ``tick(now, connections)``; the methods it
lacks are skipped. What ingest counted is ``counters``
(:class:`~stepwatch.collector.state._ingest_counters.IngestCounters`): the gRPC server counts
its refusals into the same one.
"""

from __future__ import annotations

import logging
from typing import Generator, Optional, Sequence

from stepwatch.proto.stepwatch.v1 import agent_pb2

from ..wire import SampleColumns, step_columns
from ..wire import bound_window_names
from ..wire import clear_out_of_range, drop_far, drop_nonfinite
from ..state import IngestCounters
from ..state import CollectorState, RankKey

__all__ = ["Pipeline"]

log = logging.getLogger("stepwatch.collector")


class Pipeline:
    def __init__(self, state: CollectorState, listeners: Sequence[object],
                 counters: Optional[IngestCounters] = None):
        self.state = state
        self.listeners = list(listeners)
        self.counters = counters if counters is not None else IngestCounters()

    def _each(self, method: str):
        return [getattr(listener, method) for listener in self.listeners if hasattr(listener, method)]

    def connect(self, hello: agent_pb2.Hello, now: float) -> RankKey:
        """A validated Hello opened a stream; returns the rank's key."""
        key = self.state.connect(hello, now)
        self.counters.add("streams_accepted")
        for call in self._each("on_connect"):
            call(hello, now)
        return key

    def batch(self, key: RankKey, hello: agent_pb2.Hello, batch: agent_pb2.Batch, now: float) -> bool:
        """Apply one batch; listeners see it only when it was new (not a resent duplicate).
        Records with non-finite numbers, and steps and samples far from ``now`` in time (or
        numbered beyond any real job), are dropped and counted first."""
        counters = self.counters
        counters.add("batches_received")
        steps, samples = step_columns(batch), SampleColumns(batch)
        # phases over their bound, cut as the steps were read
        counters.add_by("trimmed", "string", steps.cut)
        if batch.windows:
            counters.add_by("trimmed", "window_names", bound_window_names(batch))
        finite, sampled = steps.finite(), samples.finite()
        dropped = drop_nonfinite(batch, (("steps",) if finite else ()) + (SampleColumns.FIELDS if sampled else ()))
        if dropped:
            counters.add("nonfinite_records", dropped)
            if not finite or batch.phase_times:
                steps = step_columns(batch)  # without the dropped steps or phase times
            if not sampled:
                samples = SampleColumns(batch)  # without the dropped samples
        huge = clear_out_of_range(batch)
        if huge:
            counters.add("out_of_range_fields", huge)
            samples = SampleColumns(batch)  # without the cleared counters
        far = drop_far(batch, now, steps, samples)
        if far:
            counters.add("far_records", far)
            steps, samples = step_columns(batch), SampleColumns(batch)
        verdict, agent_dropped = self.state.apply_batch(key, hello.session_id, batch, now, steps, samples)
        if verdict != "applied":
            if verdict != "gone":
                counters.add("batches_duplicate" if verdict == "duplicate" else "batches_seq_refused")
            return False
        counters.add("records_dropped", agent_dropped)
        for call in self._each("on_batch"):
            call(hello, batch, now, steps, samples)
        return True

    def disconnect(self, key: RankKey, hello: agent_pb2.Hello, now: float) -> None:
        self.state.disconnect(key, now)
        for call in self._each("on_disconnect"):
            call(hello, now)

    def housekeeping(self, now: float) -> list[RankKey]:
        """One tick: expire ranks gone longer than the grace period, let listeners forget
        them, then run the time-based rules. Returns the expired keys."""
        slices = self.housekeeping_slices(now)
        while True:
            try:
                next(slices)
            except StopIteration as done:
                return done.value

    def housekeeping_slices(self, now: float) -> Generator[None, None, list[RankKey]]:
        """:meth:`housekeeping` as a generator that yields between slices of the listeners'
        ``tick_slices`` (a listener with only ``tick`` runs whole); its return value is the
        expired keys. The live collector lets the event loop take other work at each yield."""
        gone = self.state.expire(now)
        if gone:  # one line a tick at most: a fleet reconnecting in a loop expires ranks every tick
            named = ", ".join(f"job={job} rank={rank}" for job, rank in gone[:3])
            more = f" and {len(gone) - 3} more ranks" if len(gone) > 3 else ""
            log.info("stepwatch collector: expired series of %s%s", named, more)
            for call in self._each("forget"):
                call(gone)
        connections = self.state.connections()
        for listener in self.listeners:
            if hasattr(listener, "tick_slices"):
                yield from listener.tick_slices(now, connections)
            elif hasattr(listener, "tick"):
                listener.tick(now, connections)
        return gone
