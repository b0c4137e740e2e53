"""attach() at the top of a script (as the README shows it) whose DataLoader spawns its
workers: each worker re-imports the script and so calls attach(); only the trainer, the process
that steps the optimizer, starts an agent. A real collector sees one session, from the trainer's
pid."""

from __future__ import annotations

import pathlib
import time

from _procs import run_script, trainer_env

JOB = pathlib.Path(__file__).resolve().parents[1] / "agent" / "spawn_worker_job.py"


def test_spawned_dataloader_workers_start_no_agent(collector_factory, tmp_path):
    col = collector_factory()
    run = run_script(JOB, trainer_env(tmp_path, col.grpc, "spawn-workers"), timeout=180)
    line = [l for l in run.stdout.splitlines() if l.startswith("trainer ")][-1]
    _, pid, state = line.split()
    assert state == "agent", run.stdout + run.stderr[-2000:]
    time.sleep(0.5)
    (job,) = [j for j in col.api("/api/jobs")["jobs"] if j["job"] == "spawn-workers"]
    assert [(r["rank"], r["pid"]) for r in job["ranks"]] == [(0, int(pid))], job
