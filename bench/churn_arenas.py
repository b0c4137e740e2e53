"""pymalloc's arenas before, at the peak of and after a churn of connecting and leaving ranks, in
process through the collector's real pipeline (no gRPC): what holds the resident memory a churn
leaves (bench/results/connection_churn_2core.md, its section on arenas).

    python bench/churn_arenas.py CYCLES [--clear-runs | --keep N | --repack]

1,000 ranks of ten jobs, each cycle a Hello of a new session, one step and a disconnect, 500
cycles a second of data time (about 1,000 ranks held at once with a 2-s grace, as the churn bench
holds them); arenas counted from ``sys._debugmallocstats()``. ``--clear-runs``: at the end, the run
store's records held in memory dropped; ``--keep N``: the store keeps N runs a job; ``--repack``:
at the end, every held record copied anew and the old ones freed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
import tempfile
import time

import psutil

from stepwatch.collector._app import Collector
from stepwatch.collector._config import CollectorSettings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from connection_churn import cycle_messages  # noqa: E402  (the churn bench's cycle)


def arenas() -> int:
    """pymalloc's arenas allocated now (``sys._debugmallocstats`` writes to fd 2: read through a
    temporary file, which, unlike a pipe, cannot fill up and block the write)."""
    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read()
    return int(re.search(rb"# arenas allocated current\s*=\s*([\d,]+)", text).group(1).replace(b",", b""))


def rss_mb() -> int:
    return psutil.Process().memory_info().rss >> 20


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("cycles", type=int)
    p.add_argument("--clear-runs", action="store_true")
    p.add_argument("--keep", type=int, default=0)
    p.add_argument("--repack", action="store_true")
    a = p.parse_args()
    col = Collector(CollectorSettings(agent_grace_s=2.0))
    store = col.detection.engine.lineage.store
    if a.keep:
        store.keep = a.keep

    def cycle(c: int, t: float) -> None:
        hello, batch = cycle_messages(c, 1000, t)
        key = col.pipeline.connect(hello, t)
        col.pipeline.batch(key, hello, batch, t)
        col.pipeline.disconnect(key, hello, t)

    now = t = time.time()
    col.pipeline.housekeeping(now)
    gc.collect()
    print("idle: arenas", arenas(), "rss MB", rss_mb())
    for c in range(a.cycles):
        t = now + c / 500.0
        cycle(c, t)
        if c % 200 == 0:
            col.pipeline.housekeeping(t)
    gc.collect()
    print("peak: arenas", arenas(), "rss MB", rss_mb(), "ranks", len(col.state.snapshot()))
    col.pipeline.housekeeping(t + 10)
    col.pipeline.housekeeping(t + 20)
    gc.collect()
    held = store._memory
    print("every rank expired: arenas", arenas(), "rss MB", rss_mb(), "ranks", len(col.state.snapshot()),
          "runs held", sum(len(v) for v in held.values()))
    if a.clear_runs:
        held.clear()
    elif a.repack:
        fresh = {job: {(run + ".")[:-1]: (float(st), None if head is None else json.loads(json.dumps(head)),
                                          bytes(bytearray(body)) if isinstance(body, bytes) else json.loads(json.dumps(body)))
                       for run, (st, head, body) in runs.items()} for job, runs in held.items()}
        held.clear()
        held.update(fresh)
        del fresh
    if a.clear_runs or a.repack:
        gc.collect()
        print("then: arenas", arenas(), "rss MB", rss_mb())


if __name__ == "__main__":
    main()
