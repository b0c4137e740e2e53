"""What one rank costs the collector in Python objects when it connects, sends one step and
stays: the figure behind the resident memory a churn of connecting and leaving agents leaves
(bench/results/connection_churn_2core.md). Counted with tracemalloc in this process through the
collector's real pipeline (state, detection, alerting), the same Hello and Batch as the churn's."""

from __future__ import annotations

import gc
import time
import tracemalloc

from stepwatch.collector._app import Collector
from stepwatch.collector._config import CollectorSettings
from stepwatch.proto.stepwatch.v1 import agent_pb2


def _rank(col, rank: int, session: str, now: float) -> None:
    hello = agent_pb2.Hello(job=f"churn-{rank % 10}", rank=rank, world_size=1000, host=f"node-{rank % 50}",
                            pid=10_000 + rank, session_id=session, agent_version="0.1.0")
    key = col.pipeline.connect(hello, now)
    col.pipeline.batch(key, hello, agent_pb2.Batch(seq=1, steps=[agent_pb2.StepRecord(
        step=rank + 1, end_time_s=now, duration_s=0.04)]), now)


def test_a_rank_that_connected_and_sent_one_step_holds_under_18_5_kb():
    """Measured 16.8 KB a rank (Python 3.11): 19.3 KB before the drift buckets' recent values
    were kept from their first and their owner held by a plain weak reference (two empty 64-slot
    deques, two WeakMethods); 28.1 KB before empty rings shared their columns and a rank's events
    and windows were kept from their first (its 15 rings' 104 empty arrays, two empty deques).
    1,000 such ranks held at once are what a churn grows the process by."""
    col = Collector(CollectorSettings())
    now = time.time()
    for r in range(20):  # (first use: lazily made tables, interned names)
        _rank(col, r, f"warm{r}", now)
    col.pipeline.housekeeping(now + 1)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        n = 300
        for r in range(20, 20 + n):
            _rank(col, r, f"s{r}", now)
        col.pipeline.housekeeping(now + 2)
        gc.collect()
        grown = sum(d.size_diff for d in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert len(col.state.snapshot()) >= n  # (every rank is held)
    assert grown / n < 18_500, f"{grown / n:.0f} bytes a rank"
