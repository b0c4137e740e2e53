"""A large job's start in the collector's pipeline, in process: one job of N ranks, each a Hello
and one batch of one step through ``Collector.pipeline`` (state, detection, alerting, the runs'
lineage), then one housekeeping tick; seconds for each part.

    python bench/run_record_start.py 1000 3000 5000 [--profile]

bench/results/run_record_start_2core.md has the figures (with bench/collector_scale.py's
``--ranks-per-job 3000`` over gRPC).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start(ranks: int, profile: bool = False) -> dict:
    from stepwatch.collector._app import Collector
    from stepwatch.collector._config import CollectorSettings
    from stepwatch.proto.stepwatch.v1 import agent_pb2

    col = Collector(CollectorSettings())
    now = time.time()

    def go():
        for r in range(ranks):
            hello = agent_pb2.Hello(job="big", rank=r, world_size=ranks, host=f"node-{r // 8}", pid=10_000 + r,
                                    session_id=f"s{r}", agent_version="0.1.0")
            key = col.pipeline.connect(hello, now)
            col.pipeline.batch(key, hello, agent_pb2.Batch(seq=1, steps=[agent_pb2.StepRecord(
                step=1, end_time_s=now, duration_s=0.04)]), now)

    t = time.perf_counter()
    if profile:
        prof = cProfile.Profile()
        prof.runcall(go)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(15)
    else:
        go()
    joined = time.perf_counter() - t
    t = time.perf_counter()
    col.pipeline.housekeeping(now + 1)
    return {"ranks": ranks, "connect_and_batch_s": round(joined, 2), "tick_s": round(time.perf_counter() - t, 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ranks", type=int, nargs="+")
    p.add_argument("--profile", action="store_true")
    a = p.parse_args()
    for n in a.ranks:
        print(start(n, a.profile))


if __name__ == "__main__":
    main()
