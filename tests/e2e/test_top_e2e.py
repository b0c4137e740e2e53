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
        assert lines[0].split()[:3] == ["JOB", "RANK", "STEPS"]
        rows = [line.split() for line in lines[1:]]
        assert [(r[0], r[1], r[2]) for r in rows] == [("topjob", "0", "30"), ("topjob", "1", "30")], run.stdout
        assert all(r[3] == "0.0" and float(r[4]) > 5 and r[6] == "-" for r in rows), run.stdout  # done; CPU
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
