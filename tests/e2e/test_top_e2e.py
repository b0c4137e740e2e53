"""`stepwatch top --once` renders jobs and ranks from a live collector: a real CPU training job
(2 ranks, gloo) reported over gRPC; a collector that is not there is a clear error."""

from __future__ import annotations

import os
import subprocess
import sys

from _procs import Collector, run_trainer, trainer_env


def top(*args):
    return subprocess.run([sys.executable, "-m", "stepwatch.collector.tools", "top", *args],
                          capture_output=True, text=True, timeout=60)


def test_top_shows_every_rank_of_a_live_job(tmp_path):
    col = Collector(tmp_path).start()
    try:
        run_trainer(trainer_env(tmp_path, col.grpc, "topjob"), "--steps", "30", "--step-sleep-s", "0.01", nproc=2)
        col.wait_value("stepwatch_steps_total", 30, training_job="topjob", rank=1)
        run = top("--http", col.http, "--once", "--interval", "0.2")
        assert run.returncode == 0, run.stderr
        lines = run.stdout.strip().splitlines()
        assert lines[0].split()[:4] == ["JOB", "RANK", "STATE", "STEPS"]
        table = lines[1:lines.index("")] if "" in lines else lines[1:]  # (then the RUNS lines)
        rows = [line.split() for line in table if not line.startswith("unarmed:")]
        assert [(r[0], r[1], r[3]) for r in rows] == [("topjob", "0", "30"), ("topjob", "1", "30")], run.stdout
        # finished: "ended", no rate; the step time is the median of the last steps (>= the
        # 10 ms sleep, far below the first step's start-up); no GPU on CPU; ended before its
        # detector armed (3 minutes), which a note under the table says how to change
        assert all(r[2] == "ended" and r[4] == "-" and 10 <= float(r[5]) < 500 and r[7] == "-" and r[8] == "unarmed"
                   for r in rows), run.stdout
        assert any(line.startswith("unarmed: the rank ended before") for line in table), run.stdout
        assert any(line.startswith("topjob") and " run from " in line for line in lines), run.stdout
    finally:
        col.kill()


def test_top_without_a_collector_is_a_clear_error():
    run = top("--http", "127.0.0.1:9", "--once", "--interval", "0.1")
    assert run.returncode == 1 and "cannot read the collector at 127.0.0.1:9" in run.stderr
    run = top("--interval", "0")
    assert run.returncode == 2 and "--interval must be > 0" in run.stderr


def test_top_sends_the_http_token(tmp_path):
    col = Collector(tmp_path, ["--http-token", "t0p"]).start()
    try:
        denied = top("--http", col.http, "--once", "--interval", "0.1")
        assert denied.returncode == 1 and "401" in denied.stderr, denied.stderr
        env = dict(os.environ, STEPWATCH_HTTP_TOKEN="t0p")
        run = subprocess.run([sys.executable, "-m", "stepwatch.collector.tools", "top", "--http", col.http, "--once",
                              "--interval", "0.1"], capture_output=True, text=True, timeout=60, env=env)
        assert run.returncode == 0 and run.stdout.startswith("JOB"), run.stderr
    finally:
        col.kill()


def test_top_puts_what_is_wrong_first():
    """Rows as /api/jobs and /api/alerts give them: the job with a critical alert comes first
    (above an alphabetically earlier live job and a finished one), its alert cell carries the
    severity, the change and the first part of the why; a finished job is marked ended."""
    from stepwatch.collector.tools.top import render

    def rank(live, steps, median_s, alerts=()):
        return {"steps": steps, "live": live, "median_s": median_s, "wait": 0.01, "gpu": 0.9, "alerts": list(alerts)}

    alert = {"alertname": "StepwatchThroughputDrift", "severity": "critical", "ratio": 1.133, "state": "firing",
             "diagnosis": "GPU kernels +3.9 ms/step; host CPU +0.1 ms/step"}
    info = dict(alert, severity="info", ratio=1.03)
    now = {"time": 10.0, "ranks": {("a-done", 0): rank(False, 500, 0.05), ("b-live", 0): rank(True, 900, 0.04),
                                   ("c-info", 0): rank(True, 100, 0.04, [info]),
                                   ("z-slow", 1): rank(True, 300, 0.047, [alert, info]), ("z-slow", 0): rank(True, 300, 0.0415)}}
    before = {"time": 8.0, "ranks": {k: dict(v, steps=v["steps"] - 20) for k, v in now["ranks"].items()}}
    rows = render(now, before).splitlines()[1:]
    assert [r.split()[:2] for r in rows] == [["z-slow", "0"], ["z-slow", "1"], ["c-info", "0"], ["b-live", "0"],
                                             ["a-done", "0"]], rows
    assert rows[1].split()[2:6] == ["live", "300", "10.0", "47.0"], rows[1]
    assert rows[1].endswith("critical ThroughputDrift +13.3% (GPU kernels +3.9 ms/step) +1 more"), rows[1]
    assert rows[0].endswith("  -") and rows[4].split()[2:5] == ["ended", "500", "-"], rows
