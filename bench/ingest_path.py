"""The collector's ingest path without the network: recorded agent batches (the real H200
recording, as bench/collector_scale.py sends them) applied through ``Pipeline.batch`` (non-finite
check, state, detection, diagnosis evidence) for N ranks, in this process. Measures Python CPU
per step on the path gRPC hands a parsed batch to, which is what the collector's own code costs
(gRPC and asyncio come on top: bench/collector_scale.py).

    python bench/ingest_path.py --ranks 1000 --batches 24
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collector_scale import templates  # noqa: E402


def recorded_batch(parts: tuple, seq: int, samples: int, n: int = 20, period: float = 5.0, fill: bool = False):
    """Batch ``seq`` of one rank, from the recording's ``parts`` (bench/collector_scale.py's
    templates()): ``n`` steps ending at 1.7e9 + ``period`` x seq, ``samples`` GPU, host and
    allocator samples of each kind over that period, a window per minute of batches (every
    12th at 5 s). ``fill``: the steps spread over the whole period (one step every period / n,
    as a job that trains through the batch), not 10 ms apart at its end."""
    from stepwatch.proto.stepwatch.v1 import agent_pb2

    steps, gpu, host, alloc, windows = parts
    end = 1.7e9 + seq * period
    b = agent_pb2.Batch(seq=seq, sealed_time_s=end)
    for i in range(n):
        s = b.steps.add()
        s.CopyFrom(steps[(seq * n + i) % len(steps)])
        s.step, s.end_time_s = (seq - 1) * n + i + 1, end - (n - i) * (period / n if fill else 0.01)
        if fill:
            s.duration_s = period / n
    for src, dst in ((gpu, b.gpu_samples), (host, b.host), (alloc, b.allocator)):
        for k in range(samples):
            dst.add().CopyFrom(src[(seq * samples + k) % len(src)])
            dst[-1].time_s = end - (samples - 1 - k) * period / samples
    if seq % max(1, round(60 / period)) == 0 and windows:
        w = b.windows.add()
        w.CopyFrom(windows[seq % len(windows)])
        # (dated as the batch, as bench/collector_scale.py does: a window from the recording's
        # own time would never come after an alert's onset)
        w.first_step, w.last_step, w.start_time_s = (seq - 1) * n + 1, (seq - 1) * n + 3, end
    return b


def connected_pipeline(ranks: int, ranks_per_job: int = 64):
    """A collector pipeline (state and detection, as the collector builds them) with ``ranks``
    ranks connected, jobs of ``ranks_per_job``: (pipeline, [(rank key, Hello)])."""
    from stepwatch.collector.ingest._pipeline import Pipeline
    from stepwatch.collector.state._state import CollectorState
    from stepwatch.collector.alerting import Detection
    from stepwatch.collector.detect import DetectionConfig
    from stepwatch.proto.stepwatch.v1 import agent_pb2

    pipe = Pipeline(CollectorState(300.0), [Detection(DetectionConfig(), log_changes=False)])
    hellos = []
    for r in range(ranks):
        h = agent_pb2.Hello(job=f"job{r // ranks_per_job:04d}", rank=r % ranks_per_job, world_size=ranks_per_job,
                            host=f"node-{r // 8}", session_id=f"s{r}",
                            gpu=agent_pb2.GpuIdentity(index=r % 8, uuid=f"GPU-{r}", name="NVIDIA H200"))
        hellos.append((pipe.connect(h, 0.0), h))
    return pipe, hellos


def time_scrapes(state, n: int, fork: bool = False) -> list[float]:
    """CPU ms of ``n`` /metrics bodies of ``state`` (summary mode, text, gzip level 1 as the
    collector sends it), after a full collection and a freeze (the collector's GcFreezer keeps
    the state frozen; a scrape's own objects are collected as usual). ``fork``: each rendered
    by a forked child as the collector's render process does (garbage collection off, the
    label texts warmed here first): the child's CPU, its page faults (copy on write) included."""
    import gzip
    import resource

    from stepwatch.collector.export._exposition import render
    from stepwatch.collector.export._metrics import RankMetrics

    metrics, out = RankMetrics(state), []
    gc.collect()
    gc.freeze()
    try:
        for _ in range(n):
            if not fork:
                t0 = time.process_time()
                gzip.compress(render(metrics.families()).encode(), 1)
                out.append(1e3 * (time.process_time() - t0))
                continue
            if hasattr(metrics, "warm"):
                metrics.warm()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            pid = os.fork()
            if pid == 0:
                gc.disable()
                gzip.compress(render(metrics.families(frozen=True)).encode(), 1)
                os._exit(0)
            os.waitpid(pid, 0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            out.append(1e3 * (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime))
    finally:
        gc.unfreeze()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1000)
    p.add_argument("--batches", type=int, default=24, help="batches per rank")
    p.add_argument("--ranks-per-job", type=int, default=64)
    p.add_argument("--samples-per-batch", type=int, default=1, help="GPU, host and allocator samples of each kind "
                   "per batch (5: the agent's 1 Hz over a 5 s batch; 1: as recorded results before the sixth "
                   "session)")
    p.add_argument("--steps-per-batch", type=int, default=20, help="80 with --batch-s 20 and 20 samples: the "
                   "batches of a collector that paces its agents to 20 s (10,000 ranks at max_batches_per_s 500)")
    p.add_argument("--batch-s", type=float, default=5.0, help="data time each batch covers")
    p.add_argument("--fill", action="store_true", help="steps spread over each batch's period, each as long "
                   "as the spacing (a job training through it: the GPU-activity straggler rule judges "
                   "such buckets only)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--ticks", type=int, default=0, help="then time this many housekeeping ticks (expiry and "
                   "the time-based rules over every rank) on the fed state")
    p.add_argument("--scrapes", type=int, default=0, help="then time this many /metrics bodies of the fed state "
                   "(summary mode, text format, gzip), as the HTTP thread renders them, with the garbage "
                   "collector's freeze as the collector keeps it")
    p.add_argument("--fork", action="store_true", help="--scrapes rendered by forked children (the render "
                   "process of a collector on two or more cores): their CPU")
    p.add_argument("--bounds", action="store_true", help="also cut each batch's strings to their "
                   "bounds first (collector/wire/_bounds.py, as the gRPC server does before Pipeline.batch)")
    args = p.parse_args()

    from stepwatch.collector.wire._bounds import bound_strings
    from stepwatch.proto.stepwatch.v1 import agent_pb2

    parts = templates()
    results, ticks, scrapes = [], [], []
    for _ in range(args.repeat):
        pipe, hellos = connected_pipeline(args.ranks, args.ranks_per_job)
        payloads = [recorded_batch(parts, seq, args.samples_per_batch, args.steps_per_batch,
                                   args.batch_s, args.fill).SerializeToString()
                    for seq in range(1, args.batches + 1)]
        gc.collect()
        cpu0 = time.process_time()
        for data in payloads:  # a batch of every rank, then the next: the order they arrive in
            for key, h in hellos:
                b = agent_pb2.Batch.FromString(data)
                if args.bounds:
                    bound_strings(b)
                pipe.batch(key, h, b, 1.7e9)
        cpu = time.process_time() - cpu0
        n_steps = args.ranks * args.batches * args.steps_per_batch
        results.append(1e6 * cpu / n_steps)
        for i in range(args.ticks):  # a tick as the collector runs it, data time just after the last batch
            t0 = time.process_time()
            pipe.housekeeping(1.7e9 + args.batches * args.batch_s + 1 + i)
            ticks.append(1e3 * (time.process_time() - t0))
        if args.scrapes:
            scrapes += time_scrapes(pipe.state, args.scrapes, args.fork)
    out = {"ranks": args.ranks, "batches_per_rank": args.batches, "samples_per_batch": args.samples_per_batch,
           "steps_per_batch": args.steps_per_batch, "batch_s": args.batch_s, "bounds": args.bounds,
           "us_per_step": sorted(results),
           **({"tick_ms": sorted(ticks)} if ticks else {}),
           **({("scrape_child_ms" if args.fork else "scrape_ms"): sorted(scrapes)} if scrapes else {}),
           "python": platform.python_version(), "machine": platform.platform(), "cpus": os.cpu_count()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
