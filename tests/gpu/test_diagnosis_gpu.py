"""Explained alerts on a real GPU: a transformer job (d_model 512, 4 layers, batch 16 x 256
tokens, loss.item() every step, 2,000 steps; the drift detector on horizons of seconds, armed
after 8 s of steps) gets slower from step 1,000 (~15 s in at ~15 ms steps: after the detector
is armed; at step 400, ~6 s in, the H100 run of 2026-11-27 raised nothing for two of the three
causes, most likely their change learnt as the job's level; not shown: the recording was not kept, it is now under $OUT) for a known reason; the drift
alert's diagnosis names that reason first:
  backward    extra 2048^2 GEMMs queued in the backward pass (GPU work)
  dataloader  a sleep in the DataLoader's collate (the trainer waits for data: the data phase)
  optimizer   host work (a sleep) inside Optimizer.step, before the update kernels
Jobs run one after the other on the one GPU, so one's extra work never slows another.
The GPU's clocks and power limit are left as they are: every slowdown is software."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest
import yaml

pytestmark = pytest.mark.skipif(
    not __import__("torch").cuda.is_available(), reason="needs a CUDA device")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from _procs import Collector, trainer_env  # noqa: E402

DETECTION = {"warmup_steps": 10, "resolve_hold_s": 600, "trace_steps": 0,
             "drift": {"bucket_s": 0.5, "min_bucket_steps": 3, "warmup_s": 2, "settle_s": 6, "critical_window_s": 2, "warning_window_s": 3, "info_window_s": 6, "clear_s": 1, "z": 3}}
MODEL = ("--device", "cuda", "--d-model", "512", "--layers", "4", "--batch", "16", "--seq", "256", "--item")
CAUSES = {"backward": ("backward", 6.0), "dataloader": ("data", 6.0), "optimizer": ("optimizer", 6.0)}
STEPS, FROM = 2000, 1000


@pytest.fixture(scope="module")
def alerts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("diag-gpu")
    cfg = tmp / "collector.yml"
    cfg.write_text(yaml.safe_dump({"detection": DETECTION, "record": str(tmp / "record.jsonl")}))
    col = Collector(tmp, ["--config", str(cfg)]).start()
    try:
        for cause, (_, ms) in CAUSES.items():
            # windows at their default, on demand: the diagnosis comes from the phase times (a
            # window every 32 steps puts every onset within two buckets of a window's end, where
            # it is taken for the profiler's own cost). The budget is raised for a 25 s job: the
            # window the alert asks for would be over the default budget in it.
            env = trainer_env(tmp, col.grpc, f"gpu-{cause}", STEPWATCH_OVERHEAD_BUDGET="0.5")
            run = subprocess.run([sys.executable, "-m", "stepwatch.collector.tools.train", "--steps", str(STEPS),
                                  *MODEL, "--cause", cause, "--cause-from-step", str(FROM), "--cause-ms", str(ms)],
                                 env=env, capture_output=True, text=True, timeout=300)
            assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
        time.sleep(2)
        got = col.api("/api/alerts")["alerts"]
        out = os.environ.get("OUT")
        rows = []
        for cause, (expected, ms) in CAUSES.items():
            drift = [a for a in got if a["job"] == f"gpu-{cause}" and a["alertname"] == "StepwatchThroughputDrift"]
            a = drift[0] if drift else {}
            first = (a.get("earlier") or [a])[0].get("step", "-")
            rows.append(f"{cause:<11} {ms:>4g} ms  raised {a.get('raised_step', '-')!s:>5}  onset {first!s:>5}  "
                        f"ratio {a.get('ratio', 0):.3f}  {a.get('diagnosis', 'NO ALERT')}")
        table = "\n".join(rows)
        print("\n" + table)
        if out:
            pathlib.Path(out, "diagnosis_gpu.txt").write_text(table + "\n")
            # the recording, so a run that raised nothing can be replayed and read afterwards
            pathlib.Path(out, "diagnosis_gpu_record.jsonl").write_bytes((tmp / "record.jsonl").read_bytes())
        yield got
    finally:
        col.kill()


@pytest.mark.parametrize("cause", list(CAUSES))
def test_the_gpu_diagnosis_names_the_injected_cause_first(alerts, cause):
    drift = [a for a in alerts if a["job"] == f"gpu-{cause}" and a["alertname"] == "StepwatchThroughputDrift"]
    assert drift, f"no drift alert for {cause}"
    diagnosis = drift[0]["diagnosis"]
    assert diagnosis.startswith(CAUSES[cause][0] + " +"), diagnosis
    assert "no profiler window after the onset" not in diagnosis, diagnosis
    # the cause's own onset is one of the episode's onsets (its first, in ``earlier``, and each
    # further change): a change that grew further (the sleeping optimizer's step +40%, then +49%
    # 160 steps on, on one H200) shows that as a further change, and at this test's horizons of
    # seconds (z 3, a 2-s critical window) a host's wander can open the episode first (one H200,
    # 2026-12-03: the optimizer job's p10 step 11.1 -> 12.0 ms from step 715, raised at 928 with
    # "no measured contributor"; the sleep from step 1,000 then its further change at 999, named
    # "optimizer +4.7 ms/step"; bench/results/gpu_tests_h200zq.md)
    onsets = [e["step"] for e in drift[0].get("earlier") or []] + [drift[0]["step"]]
    assert any(abs(s - FROM) <= 60 for s in onsets), drift[0]
    if cause == "dataloader":  # the data phase, with the loader wait that made it longer
        assert "data-loader wait +" in diagnosis.split(";")[0], diagnosis
    # (At the window default, on demand, no window precedes the onset, so the GEMM kernel is not
    # named as a change: bench/results/diagnosis_without_windows.md. The phase that grew is.)
