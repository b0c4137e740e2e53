"""The Hugging Face and Lightning callbacks against a real collector over gRPC: real CPU
training (transformers Trainer with a tiny GPT-2 built from a config; Lightning DDP over two
gloo processes) reports samples, tokens, ranks, and marked evaluation phases."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from _procs import Collector, trainer_env

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(script: str, env: dict, *args: str) -> str:
    proc = subprocess.run([sys.executable, os.path.join(HERE, script), *args], env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc.stderr


def test_hf_trainer_callback_reports_samples_tokens_and_marks(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    col = Collector(tmp_path).start()
    try:
        env = trainer_env(tmp_path, col.grpc, "hfjob")
        _run("hf_job.py", env, str(tmp_path / "out"))
        col.wait_value("stepwatch_steps_total", 40, training_job="hfjob", rank=0)
        # 4 per device x 2 accumulation steps = 8 samples of 16 tokens per optimizer step
        assert col.value("stepwatch_samples_total", training_job="hfjob", rank=0) == 40 * 8
        assert col.value("stepwatch_tokens_total", training_job="hfjob", rank=0) == 40 * 8 * 16
        # Evaluations after steps 10, 20, 30 (the one after 40 has no later step to mark),
        # a checkpoint after step 25.
        assert col.value("stepwatch_pauses_total", training_job="hfjob", rank=0, kind="eval") == 3
        assert col.value("stepwatch_pauses_total", training_job="hfjob", rank=0, kind="checkpoint") == 1
    finally:
        col.kill()


def test_lightning_ddp_callback_reports_both_ranks_and_marks_validation(tmp_path):
    pytest.importorskip("lightning")
    col = Collector(tmp_path).start()
    try:
        env = trainer_env(tmp_path, col.grpc, "pljob")
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(name, None)
        _run("lightning_job.py", env)
        for rank in (0, 1):
            col.wait_value("stepwatch_steps_total", 30, training_job="pljob", rank=rank)
            # a DistributedSampler gives each rank batches of 4 sequences of 12 tokens
            assert col.value("stepwatch_samples_total", training_job="pljob", rank=rank) == 30 * 4
            assert col.value("stepwatch_tokens_total", training_job="pljob", rank=rank) == 30 * 4 * 12
            # validation after steps 10 and 20 (the one at 30 ends the run)
            assert col.value("stepwatch_pauses_total", training_job="pljob", rank=rank, kind="eval") == 2
        assert col.value("stepwatch_steps_total", training_job="pljob", rank=2) is None
    finally:
        col.kill()


def test_hf_logging_every_step_does_not_hide_a_slowdown(tmp_path):
    """logging_steps=1: the callback marks every step "log"; the steps the logging did not delay
    still count, so a slowdown from step 200 on raises a drift alert (it was never reported when
    every marked step was left out)."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    import time
    # Armed 4 s in, 3 s before the slowdown (step 200 of ~35 ms steps): a 2 s host hump at 5-7 s
    # on a 2-core machine (seen once in six runs) dated the change inside the settling time when
    # the settling ended at 7 s, and the job settled again on the slow level
    detection = ("{warmup_steps: 10, eval_interval_s: 0.5, drift: {bucket_s: 0.5, min_bucket_steps: 3, "
                 "warmup_s: 1, settle_s: 3, critical_window_s: 2, warning_window_s: 3, info_window_s: 5, "
                 "clear_s: 1, z: 3}}")
    col = Collector(tmp_path, ["--detection", detection]).start()
    try:
        env = trainer_env(tmp_path, col.grpc, "hflog", PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
        _run("hf_slow_job.py", env, str(tmp_path / "out"))
        col.wait_value("stepwatch_steps_total", 400, training_job="hflog", rank=0)
        assert col.value("stepwatch_pauses_total", training_job="hflog", rank=0, kind="log") >= 1
        time.sleep(1.0)
        drift = [a for a in col.api("/api/alerts")["alerts"]
                 if a["job"] == "hflog" and a["alertname"] == "StepwatchThroughputDrift"]
        # (on failure: what the rank's detector said; it failed once in ~6 whole-suite runs with
        # the slowdown at +40%, raising nothing, not reproduced alone or under 3 busy loops)
        assert drift, (col.api("/api/alerts"), col.api("/api/jobs"))
        # an onset of some episode (or a further change) near step 200: within 40 steps (~1.4 s,
        # under three buckets) before it, as a 2-core host's hump just ahead of the change dated
        # it once in CI (step 165), and an earlier hump's own episode does not hide it
        onsets = [a["step"] for a in drift] + [e["step"] for a in drift for e in a.get("earlier", [])]
        assert any(160 <= s <= 240 for s in onsets), (onsets, [(a['severity'], a['step'], a['summary']) for a in drift])
    finally:
        col.kill()
