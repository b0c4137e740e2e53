"""``stepwatch demo``: a collector and a small CPU training job with the agent attached.

Starts the collector as a subprocess (ports chosen by the OS), runs the demo trainer with
``STEPWATCH_COLLECTOR`` pointing at it, then prints where to look, a short table of what the
collector received and the alert it raised. The job (under a minute) takes profiler windows
as the agent does by default, on demand: the one the slowdown alert asks for. From two thirds
of its steps on (``--slow-from-step``) its data loader is slower (+40% of the step): the
collector raises a drift alert with its why within seconds, because the demo's collector judges drift
over seconds (``DEMO_DETECTION``; pauses only from 3x a step) where the defaults take minutes
of a real job's own noise. Its temporary directory is removed at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Optional

__all__ = ["main", "DEMO_DETECTION"]

# Drift judged over seconds (the demo's ~0.12 s steps); the defaults judge over minutes.
DEMO_DETECTION = {"warmup_steps": 10, "eval_interval_s": 0.5,
                  # 8 s of warm-up (the job's start), then 8 s to settle: with a
                  # CPU burner beside it a 4 s settle took the start's wobble for a change
                  # buckets of 2 steps or more: on a machine slow enough for ~0.23 s steps a
                  # 0.8 s bucket of the 40%-slower steps holds 2 (with 3 a CI run raised nothing)
                  "drift": {"bucket_s": 0.8, "min_bucket_steps": 2, "warmup_s": 8, "settle_s": 8,
                            "critical_window_s": 2.4, "warning_window_s": 3, "info_window_s": 5,
                            "clear_s": 1.6, "z": 4, "pause_ratio": 3.0, "max_pause_steps": 20}}
# A small model whose step is mostly a fixed sleep, on one CPU thread: steady on a busy machine.
# With torch's two threads on a 2-core machine beside three CPU burners its 10-step medians
# wandered 127-242 ms before the slowdown (a false raise at step 121); on one thread 110-117 ms.
DEMO_JOB = ("--step-sleep-s", "0.1", "--d-model", "32", "--layers", "2", "--batch", "4", "--seq", "16",
            "--threads", "1")


def _wait_ready(path: str, proc: subprocess.Popen, timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path) as fh:
                return json.load(fh)
        if proc.poll() is not None:
            raise SystemExit(f"stepwatch demo: collector exited with code {proc.returncode}")
        time.sleep(0.1)
    raise SystemExit("stepwatch demo: collector did not start within 30 s")


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read()


def _metric(text: str, name: str, rank: str) -> str:
    for line in text.splitlines():
        if line.startswith(name + "{") and f'rank="{rank}"' in line:
            return line.rsplit(" ", 1)[1]
    return "-"


def _table(http: str, job: str) -> str:
    text = _get(f"http://{http}/metrics").decode()
    jobs = json.loads(_get(f"http://{http}/api/jobs"))["jobs"]
    rows = [("rank", "steps", "mean step ms", "dataloader wait", "trainer RSS MiB", "still connected")]
    ranks = [str(r["rank"]) for j in jobs if j["job"] == job for r in j["ranks"]]
    for rank in ranks:
        total = float(_metric(text, "stepwatch_step_duration_seconds_sum", rank) or 0)
        count = float(_metric(text, "stepwatch_step_duration_seconds_count", rank) or 0)
        rss = _metric(text, "stepwatch_process_resident_memory_bytes", rank)
        wait = _metric(text, "stepwatch_dataloader_wait_ratio", rank)
        rows.append((rank, _metric(text, "stepwatch_steps_total", rank).removesuffix(".0"),
                     f"{1000 * total / count:.1f}" if count else "-",
                     f"{100 * float(wait):.1f}% of step" if wait != "-" else "-",
                     f"{float(rss) / 2**20:.0f}" if rss != "-" else "-",
                     "yes" if _metric(text, "stepwatch_agent_connected", rank) == "1.0" else "no"))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c).rjust(w) for c, w in zip(r, widths)) for r in rows)


def _wait_steps(http: str, job: str, steps: int, timeout_s: float = 30.0) -> None:
    """Until the collector counts every step of rank 0; after ``timeout_s``, says how many it
    has. The value is read as a number: the exposition writes whole counts as ``30``."""
    deadline, seen = time.monotonic() + timeout_s, "-"
    while time.monotonic() < deadline:
        seen = _metric(_get(f"http://{http}/metrics").decode(), "stepwatch_steps_total", "0")
        try:
            if float(seen) >= steps:
                return
        except ValueError:  # ("-": no such series yet)
            pass
        time.sleep(0.2)
    print(f"stepwatch demo: the collector counted {seen} of the {steps} steps after {timeout_s:.0f} s", flush=True)


def _alerts(http: str, job: str, timeout_s: float) -> list:
    """The job's alerts, firing or resolved since (the job has ended), waiting up to
    ``timeout_s`` for the first."""
    deadline = time.monotonic() + timeout_s
    while True:
        raised = [a for a in json.loads(_get(f"http://{http}/api/alerts"))["alerts"] if a["job"] == job]
        if raised or time.monotonic() >= deadline:
            return raised
        time.sleep(0.5)


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="run a demo training job against a local collector")
    p.add_argument("--steps", type=int, default=360, help="training steps to run (default 360)")
    p.add_argument("--slow-from-step", type=int, default=None, metavar="N",
                   help="the data loader gets 40%% slower from step N on (default: two thirds of --steps "
                        "when they are 150 or more; 0: never)")
    p.add_argument("--no-stack", action="store_true", help="do not start Prometheus and Alertmanager alongside")
    p.add_argument("--keep-s", type=float, default=None, metavar="S",
                   help="keep the collector (and page) up this many seconds after training, then stop; "
                        "default: until Ctrl-C or SIGTERM, with or without a terminal; 0: stop at once")
    p.set_defaults(func=main)


def main(args) -> int:
    steps = getattr(args, "steps", 360)
    slow_from = getattr(args, "slow_from_step", None)
    if slow_from is None:
        slow_from = 2 * steps // 3 if steps >= 150 else 0
    job = "stepwatch-demo"
    workdir = tempfile.mkdtemp(prefix="stepwatch-demo-")  # private (0700), removed at the end
    try:
        return _run(args, steps, slow_from, job, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run(args, steps: int, slow_from: int, job: str, workdir: str) -> int:
    ready = os.path.join(workdir, "ready.json")
    config = os.path.join(workdir, "collector.json")
    with open(config, "w") as fh:
        json.dump({"detection": DEMO_DETECTION}, fh)
    stack = _start_stack(args, workdir, ["--config", config])
    if stack is not None:  # the stack runs the collector (collector/_stack.py)
        ready, collector = os.path.join(workdir, "collector-ready.json"), stack.collector_proc
    else:
        collector = subprocess.Popen([sys.executable, "-m", "stepwatch.collector.tools", "collector",
                                      "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
                                      "--ready-file", ready, "--config", config])
    try:
        addrs = _wait_ready(ready, collector)
        http = addrs["http"]
        print(f"stepwatch demo: collector up: gRPC {addrs['grpc']}, metrics http://{http}/metrics",
              flush=True)
        # Windows at the agent's default, on demand: none until the slowdown alert asks for one
        # (the page then shows that window), so the job's only change is its slower loader. A
        # scheduled window at step 128 was followed on a loaded machine by steps ~14% slower
        # (a CPU profiler session's lasting cost), which the collector rightly raised as the
        # profiler's own and the slowdown at 160 then joined as a further change, or nothing.
        env = dict(os.environ, STEPWATCH_COLLECTOR=addrs["grpc"], STEPWATCH_JOB=job,
                   STEPWATCH_SPOOL_DIR=os.path.join(workdir, "spool"), STEPWATCH_OVERHEAD_BUDGET="0.10")
        print(f"stepwatch demo: training a tiny transformer on CPU for {steps} steps"
              + (f"; its data loader gets 40% slower from step {slow_from}" if slow_from else "") + " ...",
              flush=True)
        subprocess.run([sys.executable, "-m", "stepwatch.collector.tools.train", "--steps", str(steps),
                        *DEMO_JOB, "--slow-from-step", str(slow_from), "--slow-factor", "1.4"],
                       env=env, check=True)
        _wait_steps(http, job, steps)
        _report(http, job, slow_from, stack)
        _keep_running(collector, getattr(args, "keep_s", None))
        return 0
    finally:
        collector.terminate()
        try:
            collector.wait(10)
        except subprocess.TimeoutExpired:
            collector.kill()
        if stack is not None:
            stack.stop()


def _report(http: str, job: str, slow_from: int, stack) -> None:
    """What the collector received, the alerts it raised and where to look."""
    print("\nWhat the collector received (job %s):\n" % job)
    print(_table(http, job))
    if slow_from:
        raised = _alerts(http, job, 15.0)
        print("\nAlerts raised by the collector (drift judged over seconds in this demo):")
        for a in raised:
            state = "firing" if a["state"] == "firing" else "resolved when the job ended"
            print(f"  {a['severity']} {a['alertname']} rank {a['rank']} ({state}): {a['summary']}"
                  + (f"\n    why: {a['diagnosis']}" if a.get("diagnosis") else ""))
        if not raised:
            print("  none (the slowdown was not raised: see the page)")
    print(f"\nWhere to look:\n  live page           http://{http}/\n"
          f"  Prometheus metrics  http://{http}/metrics\n"
          f"  JSON API            http://{http}/api/jobs\n  health              http://{http}/healthz")
    if stack is not None:
        print(f"  Prometheus          {stack.prometheus_url}/graph?g0.expr=rate(stepwatch_steps_total[1m])\n"
              f"  Prometheus alerts   {stack.prometheus_url}/alerts\n"
              f"  Alertmanager        {stack.alertmanager_hint}")


def _keep_running(collector: subprocess.Popen, keep: Optional[float]) -> None:
    """Leave the collector up ``keep`` seconds (None: until interrupted; 0: not at all)."""
    if keep is None or keep > 0:
        # Up with or without a terminal (CI, `| tee`, an IDE console): SIGTERM ends it too,
        # and Ctrl-C does even where the demo was started in the background of a script
        # (which starts it with SIGINT ignored).
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGINT, _interrupt)
        print("\nThe collector keeps running" + (f" for {keep:g} s" if keep else "")
              + "; press Ctrl-C to stop it.", flush=True)
        try:
            collector.wait(timeout=keep)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            pass


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def _start_stack(args, workdir: str, collector_args: list):
    """Prometheus and Alertmanager beside the collector when their Debian binaries exist and
    --no-stack is not given (``stepwatch stack``); None otherwise."""
    from .stack import LocalStack, StackError, binaries

    if getattr(args, "no_stack", False) or binaries() is None:
        return None
    try:
        return LocalStack(workdir, scrape_interval="5s", collector_args=collector_args).start()
    except StackError as exc:
        print(f"stepwatch demo: running without Prometheus/Alertmanager: {exc}", file=sys.stderr)
        return None
