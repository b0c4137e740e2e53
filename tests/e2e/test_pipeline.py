"""End to end, as real subprocesses: trainer(s) with the agent -> sidecar -> gRPC -> collector."""

from __future__ import annotations

import json
import os
import signal
import time

import psutil

from _procs import promtool_check, run_trainer, start_trainer, trainer_env

STEPS = 40


def test_two_rank_ddp_job_reports_every_step_per_rank(collector_factory, tmp_path):
    col = collector_factory()
    env = trainer_env(tmp_path, col.grpc, "ddp2")
    run_trainer(env, "--steps", str(STEPS), "--two-optimizers", nproc=2)
    for rank in (0, 1):
        labels = dict(training_job="ddp2", rank=rank)
        col.wait_value("stepwatch_steps_total", STEPS, **labels)
        assert col.value("stepwatch_step_duration_seconds_count", **labels) == STEPS
        assert col.value("stepwatch_step_duration_seconds_sum", **labels) > 0
        assert col.value("stepwatch_samples_total", **labels) == STEPS * 8
        assert col.value("stepwatch_tokens_total", **labels) == STEPS * 8 * 32
        assert col.value("stepwatch_dataloader_wait_seconds_count", **labels) == STEPS
        assert col.value("stepwatch_process_cpu_seconds_total", **labels) > 0
        assert col.value("stepwatch_process_resident_memory_bytes", **labels) > 50e6
        assert col.value("stepwatch_agent_records_dropped_total", **labels) == 0
    local = {s.labels["rank"]: s.labels["local_rank"] for s in col.samples()
             if s.name == "stepwatch_steps_total"}
    assert local == {"0": "0", "1": "1"}
    assert promtool_check(col.scrape_text()) == ""


def test_collector_restart_loses_nothing_and_counts_nothing_twice(collector_factory, tmp_path):
    record = tmp_path / "record.jsonl"
    col = collector_factory("--record", str(record))
    steps = 150
    env = trainer_env(tmp_path, col.grpc, "restart")
    trainer = start_trainer(env, "--steps", str(steps), "--step-sleep-s", "0.03")
    deadline = time.monotonic() + 60
    while (col.value("stepwatch_steps_total", training_job="restart") or 0) < 30:
        assert time.monotonic() < deadline and trainer.poll() is None, "no steps arrived"
        time.sleep(0.1)
    col.kill(signal.SIGKILL)
    cut = record.stat().st_size
    time.sleep(1.5)  # steps keep happening while the collector is down
    col.start()
    out, _ = trainer.communicate(timeout=120)
    assert trainer.returncode == 0, out
    col.wait_value("stepwatch_steps_total", steps, training_job="restart", rank=0)
    time.sleep(1.0)  # anything still in flight would raise it above `steps`
    assert col.value("stepwatch_steps_total", training_job="restart", rank=0) == steps

    data = record.read_bytes()
    first, second = data[:cut], data[cut:]

    def step_indices(chunk: bytes) -> list:
        out = []
        for line in chunk.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:  # a line cut by SIGKILL
                continue
            if rec["kind"] == "batch":  # the wire schema: a Batch as proto JSON
                out.extend(int(st["step"]) for st in rec["batch"].get("steps", []))
        return out

    a, b = step_indices(first), step_indices(second)
    assert len(a) == len(set(a)) and len(b) == len(set(b)), "duplicate applied within a lifetime"
    assert set(a) | set(b) == set(range(1, steps + 1)), "steps lost across the restart"
    assert b, "nothing arrived after the restart"
    # Only batches received but not yet acked when the collector died may arrive twice.
    assert len(set(a) & set(b)) <= 10
    assert not list((tmp_path / "spool").rglob("*.pb")), "spool not emptied after acks"


def test_forked_dataloader_workers_neither_hang_nor_connect(collector_factory, tmp_path):
    col = collector_factory()
    env = trainer_env(tmp_path, col.grpc, "workers")
    started = time.monotonic()
    run_trainer(env, "--steps", "30", "--workers", "2", "--load-delay-s", "0.002", timeout=120)
    assert time.monotonic() - started < 90
    col.wait_value("stepwatch_steps_total", 30, training_job="workers", rank=0)
    assert col.value("stepwatch_collector_streams_total") == 1  # one sidecar, no worker connected
    jobs = {j["job"]: j["ranks"] for j in col.api()["jobs"]}
    assert [r["rank"] for r in jobs["workers"]] == [0]
    # The sidecar exits once its trainer is gone: no stepwatch process is left behind.
    deadline = time.monotonic() + 20
    while any("stepwatch.agent._sidecar" in " ".join(p.info["cmdline"] or [])
              and p.info["environ"] and p.info["environ"].get("STEPWATCH_JOB") == "workers"
              for p in psutil.process_iter(["cmdline", "environ"])):
        assert time.monotonic() < deadline, "sidecar still running after the trainer exited"
        time.sleep(0.2)


def test_dataloader_wait_is_measured(collector_factory, tmp_path):
    col = collector_factory()
    env = trainer_env(tmp_path, col.grpc, "slowdata")
    # 8 samples x 10 ms in the main process: >= 80 ms of every step is spent waiting on data.
    run_trainer(env, "--steps", "20", "--load-delay-s", "0.01")
    col.wait_value("stepwatch_steps_total", 20, training_job="slowdata")
    waited = col.value("stepwatch_dataloader_wait_seconds_sum", training_job="slowdata")
    assert waited >= 20 * 0.08
    ratio = col.value("stepwatch_dataloader_wait_ratio", training_job="slowdata")
    assert 0.3 < ratio <= 1.0
