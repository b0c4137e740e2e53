"""Replay: drive a record file through the collector's own pipeline (state -> detection ->
alert book) on the recording's clock and return the alerts it raised (``stepwatch replay``).

Input: the collector's ``--record`` file (:mod:`._record`; the earlier per-record JSONL is read
too). Events are applied in file order; housekeeping (expiry, time-based rules) runs whenever
the data clock passes an ``eval_interval_s`` tick, as the live collector's timer does.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional

from .alerting import Alert, Detection
from .detect import DetectionConfig
from .ingest import Pipeline
from .ingest import RecordError, RecordEvent
from .state import CollectorState

__all__ = ["replay"]


def replay(events: Iterable[RecordEvent], cfg: DetectionConfig,
           agent_grace_s: float = 300.0, detection: Optional[Detection] = None) -> list[Alert]:
    """Every alert episode that fired, in firing order: its onset (``step``), raise and resolve
    steps, severity history and the summary at raise (``fired_summary``) and at the end.
    ``detection``: a fresh ``Detection(cfg, log_changes=False)`` to replay into, whose engine the
    caller reads afterwards (one is made when None)."""
    detection = detection or Detection(cfg, log_changes=False)
    detection.book.retention_s = math.inf  # keep every resolved episode of the recording
    pipeline = Pipeline(CollectorState(agent_grace_s), [detection])
    keys: dict[tuple, tuple] = {}
    now = next_tick = None
    for ev in events:
        now = ev.time if now is None else max(now, ev.time)
        next_tick = now if next_tick is None else next_tick
        while now >= next_tick:
            pipeline.housekeeping(next_tick)
            next_tick += cfg.eval_interval_s
        rank = (ev.hello.job, ev.hello.rank)
        if ev.kind == "connect":
            keys[rank] = pipeline.connect(ev.hello, now)
        elif rank not in keys:
            raise RecordError(f"{ev.kind} of job={ev.hello.job} rank={ev.hello.rank} before its connect")
        elif ev.kind == "batch":
            pipeline.batch(keys[rank], ev.hello, ev.batch, now)
        else:
            pipeline.disconnect(keys[rank], ev.hello, now)
    if now is not None:
        pipeline.housekeeping(now)
    return sorted((a for a in detection.book.snapshot() if a.fired_at is not None),
                  key=lambda a: a.fired_at)
