"""A rank slower in its own work is named from the agents' always-on phase times, with no
profiler window: real 2-rank gloo DDP training on CPU, rank 1 doing 40 ms of extra matrix
products in its backward pass from step 60. Both ranks show the same step time (rank 0 waits in
gloo's all-reduce, between its last gradient and its optimizer step), so neither step times nor
data-loader waits can tell; the phase times can. The same job without the extra work raises
nothing."""

from __future__ import annotations

import time

import yaml

from _procs import start_trainer, trainer_env

DETECTION = {"warmup_steps": 10, "eval_interval_s": 0.5}
ARGS = ("--steps", "260", "--d-model", "32", "--layers", "1", "--batch", "4", "--seq", "16")
CAUSE = ("--cause", "backward", "--cause-ms", "40", "--cause-rank", "1", "--cause-from-step", "60")


def _run(tmp_path, collector_factory, job, *extra):
    cfg = tmp_path / "collector.yml"
    cfg.write_text(yaml.safe_dump({"detection": DETECTION}))
    col = collector_factory("--config", str(cfg))
    # windows off: the phase times alone (at their default budget) must do it
    env = trainer_env(tmp_path, col.grpc, job, STEPWATCH_WINDOWS=0)
    proc = start_trainer(env, *ARGS, *extra, nproc=2)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out[-3000:]
    for rank in (0, 1):
        col.wait_value("stepwatch_steps_total", 260, training_job=job, rank=str(rank))
    return col


def _stragglers(col, job):
    return [a for a in col.api("/api/alerts")["alerts"]
            if a["job"] == job and a["alertname"] == "StepwatchStragglerRank"]


def test_slow_work_on_one_rank_is_named_from_phase_times_alone(tmp_path, collector_factory):
    col = _run(tmp_path, collector_factory, "skewed", *CAUSE)
    deadline = time.monotonic() + 10
    while not _stragglers(col, "skewed") and time.monotonic() < deadline:
        time.sleep(0.3)
    (alert,) = _stragglers(col, "skewed")
    assert alert["rank"] == 1, alert
    summary = alert["summary"]
    assert "its own work takes +" in summary and "longer in sync" in summary, summary
    assert 60 <= alert["step"] <= 60 + 100, alert  # named within 10 blocks of the change
    excess = float(summary.split("its own work takes +")[1].split(" ms")[0])
    waited = float(summary.split("they wait +")[1].split(" ms")[0])
    assert excess > 20 and waited > 20, summary  # 40 ms of extra products; rank 0 waited in gloo
    assert not col.api("/api/jobs/skewed/windows")["ranks"] or all(
        not r["windows"] for r in col.api("/api/jobs/skewed/windows")["ranks"])


def test_the_same_job_without_the_extra_work_raises_nothing(tmp_path, collector_factory):
    col = _run(tmp_path, collector_factory, "balanced")
    time.sleep(1.5)  # evaluation ticks after the last steps
    assert not _stragglers(col, "balanced"), [a["summary"] for a in _stragglers(col, "balanced")]
