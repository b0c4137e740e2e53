"""Connection churn against a real collector process: RSS and log lines before, during and after.

    python bench/connection_churn.py --cycles 100000 --ranks 1000 --workers 2 \
        --md bench/results/connection_churn_2core.md

A collector subprocess (``--agent-grace-s 2``, so the churned ranks expire two seconds after
their last stream) on loopback; ``--workers`` client processes share ``--cycles`` cycles, each a
new gRPC channel (a new TCP connection), a Hello of one of ``--ranks`` ranks (ten jobs) with a
new session id, one Batch of one step, its Ack, and the channel closed: an agent fleet
reconnecting in a loop. Read with psutil: the collector's RSS at idle (started, nothing
connected), at the end of the churn, and once every rank has expired (``/api/jobs`` empty) and
``--settle-s`` more; its log's line count. :func:`churn` is what tests/collector/ingest/
test_connection_churn.py runs with a few thousand cycles.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / (1 << 20)


def cycle_messages(cycle: int, ranks: int, now: float) -> tuple:
    """One churn cycle's (Hello, Batch): rank ``cycle % ranks`` of ten jobs under a new session,
    one step (bench/churn_arenas.py sends the same through the pipeline in process)."""
    from stepwatch.proto.stepwatch.v1 import agent_pb2

    rank = cycle % ranks
    return (agent_pb2.Hello(job=f"churn-{rank % 10}", rank=rank, world_size=ranks, host=f"node-{rank % 50}",
                            pid=10_000 + rank, session_id=f"s{cycle}", agent_version="0.1.0"),
            agent_pb2.Batch(seq=1, steps=[agent_pb2.StepRecord(step=cycle + 1, end_time_s=now, duration_s=0.04)]))


def _worker(address: str, first: int, count: int, ranks: int) -> tuple:
    import grpc

    from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc

    done = failed = 0
    for cycle in range(first, first + count):
        hello, batch = cycle_messages(cycle, ranks, time.time())
        msgs = [agent_pb2.AgentMessage(hello=hello), agent_pb2.AgentMessage(batch=batch)]
        try:
            with grpc.insecure_channel(address) as chan:
                acks = list(agent_pb2_grpc.AgentServiceStub(chan).Connect(iter(msgs), timeout=30))
            done += any(a.HasField("ack") for a in acks)
        except grpc.RpcError:
            failed += 1
    return done, failed


def churn(cycles: int, ranks: int, workers: int, settle_s: float = 5.0, workdir: str = "") -> dict:
    """Run the churn against a fresh collector process; the figures as a dict."""
    workdir = workdir or tempfile.mkdtemp(prefix="churn-")
    ready, log_path = os.path.join(workdir, "ready.json"), os.path.join(workdir, "collector.log")
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "stepwatch.collector.tools", "collector", "--grpc-listen", "127.0.0.1:0",
         "--http-listen", "127.0.0.1:0", "--ready-file", ready, "--agent-grace-s", "2"],
        stdout=log, stderr=subprocess.STDOUT,
        env=dict(os.environ, STEPWATCH_TRACE_STORE_DIR=os.path.join(workdir, "traces")))
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("collector did not start: " + open(log_path).read()[-2000:])
            time.sleep(0.05)
        time.sleep(0.2)
        addr = json.load(open(ready))
        jobs = lambda: json.load(urllib.request.urlopen(f"http://{addr['http']}/api/jobs", timeout=30))["jobs"]  # noqa: E731
        time.sleep(2)
        idle = rss_mb(proc.pid)
        results, churn_s, peak = drive(addr["grpc"], proc.pid, cycles, ranks, workers)
        at_end = rss_mb(proc.pid)
        deadline = time.monotonic() + 60
        while jobs() and time.monotonic() < deadline:
            time.sleep(0.5)
        left = len(jobs())
        time.sleep(settle_s)
        after = rss_mb(proc.pid)
        log.flush()
        lines = sum(1 for _ in open(log_path))
        return {"cycles": cycles, "ranks": ranks, "workers": workers, "acked": sum(d for d, _ in results),
                "failed": sum(f for _, f in results), "churn_s": round(churn_s, 1),
                "rss_idle_mb": round(idle, 1), "rss_peak_mb": round(peak, 1), "rss_end_mb": round(at_end, 1),
                "rss_after_mb": round(after, 1), "jobs_left": left, "log_lines": lines}
    finally:
        stop(proc)
        log.close()


def drive(address: str, pid: int, cycles: int, ranks: int, workers: int) -> tuple[list, float, float]:
    """Run ``cycles`` churn cycles against ``address`` from ``workers`` client processes (plain
    subprocesses: multiprocessing would leave its resource tracker behind as a child of the
    caller, a test process); ([(acked, failed)] of each, seconds, the peak RSS MB of ``pid``)."""
    per = cycles // workers
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", address, str(w * per),
                               str(per if w < workers - 1 else cycles - w * per), str(ranks)],
                              stdout=subprocess.PIPE, text=True) for w in range(workers)]
    peak = rss_mb(pid)
    while any(p.poll() is None for p in procs):
        peak = max(peak, rss_mb(pid))
        time.sleep(0.5)
    results = [json.loads(p.stdout.read().strip().splitlines()[-1]) for p in procs]
    return results, time.monotonic() - t0, peak


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        address, first, count, ranks = sys.argv[2], *map(int, sys.argv[3:6])
        print(json.dumps(_worker(address, first, count, ranks)))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cycles", type=int, default=100_000)
    p.add_argument("--ranks", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--settle-s", type=float, default=5.0)
    p.add_argument("--md", default="")
    a = p.parse_args()
    r = churn(a.cycles, a.ranks, a.workers, a.settle_s)
    print(json.dumps(r))
    if a.md:
        import platform

        import grpc
        with open(a.md, "w") as fh:
            fh.write(f"# Connection churn: {r['cycles']:,} connections of {r['ranks']:,} ranks, "
                     f"RSS {r['rss_idle_mb']} MB idle -> {r['rss_after_mb']} MB after every rank expired\n\n")
            fh.write(f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, grpcio {grpc.__version__}.\n\n")
            fh.write(f"    python bench/connection_churn.py --cycles {a.cycles} --ranks {a.ranks} "
                     f"--workers {a.workers} --md {a.md}\n\n")
            fh.write("| figure | value |\n|---|---:|\n")
            for k, v in r.items():
                fh.write(f"| {k} | {v} |\n")


if __name__ == "__main__":
    main()
