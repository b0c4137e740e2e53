"""On a CUDA GPU: a job that fragments the caching allocator near device capacity raises
StepwatchAllocatorFragmentation in a real collector; the same job with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True does not.

Why the thresholds separate the two (default detection.memory: fragmentation_ratio 0.25 of
inactive_split / reserved, near_capacity_ratio 0.90 of NVML used / total): the job keeps the
device ~95% full either way. With fixed segments, freeing half of the 1-10 MiB tensors packed
in 20 MiB segments leaves holes that cannot be returned to CUDA: inactive_split / reserved is
~0.4-0.5, well above 0.25. With expandable segments PyTorch excludes blocks of expandable
segments from inactive_split (fully free pages can always be unmapped), so the ratio is 0.

Prints a table (frag ratio, reserved/total, alert) and writes it to $OUT/fragmentation.txt
when $OUT is set. Two runs of ~20 s of steps each; < 3 minutes on an H200.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
import yaml

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

from _procs import trainer_env  # noqa: E402

JOB = pathlib.Path(__file__).parent / "frag_job.py"
ALERT = "StepwatchAllocatorFragmentation"


def run_case(collector_factory, tmp_path, name: str, alloc_conf: str) -> dict:
    cfg = tmp_path / f"{name}.yml"
    cfg.write_text(yaml.safe_dump({"detection": {"eval_interval_s": 0.5,
                                                 "memory": {"fragmentation_for_s": 3}}}))
    col = collector_factory("--config", str(cfg))
    env = trainer_env(tmp_path, col.grpc, name, STEPWATCH_MEMORY_STATS_INTERVAL_S="1.0",
                      STEPWATCH_NVML_INTERVAL_S="0.5")
    if alloc_conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
    else:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    truth = tmp_path / f"{name}.json"
    run = subprocess.run([sys.executable, str(JOB), str(truth), "--seconds", "20"], env=env,
                         capture_output=True, text=True, timeout=150)
    assert run.returncode == 0, run.stderr[-4000:]
    time.sleep(2.0)  # the last samples and an evaluation tick
    labels = dict(training_job=name, rank=0)
    split = col.value("stepwatch_allocator_inactive_split_bytes", **labels)
    reserved = col.value("stepwatch_allocator_reserved_bytes", **labels)
    total = col.value("stepwatch_allocator_device_total_bytes", **labels)
    used = col.value("stepwatch_gpu_memory_used_bytes", **labels)
    alerts = [a for a in col.api("/api/alerts")["alerts"] if a["job"] == name and a["alertname"] == ALERT]
    assert reserved is not None and total is not None, (
        f"{name}: no allocator sample exported; jobs: {col.api()}\ntrainer stderr:\n{run.stderr[-3000:]}")
    return {"case": name, "frag": split / reserved if reserved else 0.0, "reserved_total": reserved / total,
            "nvml_used_total": (used / total) if used else float("nan"),
            "retries": col.value("stepwatch_allocator_alloc_retries_total", **labels),
            "alert": any(a["state"] in ("firing", "resolved") for a in alerts),
            "truth": json.loads(truth.read_text()), "summaries": [a["summary"] for a in alerts]}


def test_fragmentation_alert_fixed_vs_expandable_segments(collector_factory, tmp_path):
    rows = [run_case(collector_factory, tmp_path, "fixed", ""),
            run_case(collector_factory, tmp_path, "expandable", "expandable_segments:True")]
    lines = [f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}",
             f"{'case':<11} {'frag':>6} {'reserved/total':>15} {'nvml used/total':>16} {'retries':>8}  alert"]
    for r in rows:
        lines.append(f"{r['case']:<11} {r['frag']:>6.2f} {r['reserved_total']:>15.2f} {r['nvml_used_total']:>16.2f} "
                     f"{r['retries'] if r['retries'] is not None else '-':>8}  {'yes' if r['alert'] else 'no'}")
    table = "\n".join(lines)
    print("\n" + table)
    if os.environ.get("OUT"):
        pathlib.Path(os.environ["OUT"], "fragmentation.txt").write_text(table + "\n" + json.dumps(rows, indent=1) + "\n")
    fixed, expandable = rows
    assert fixed["alert"], (table, fixed)
    assert fixed["frag"] >= 0.25 and max(fixed["reserved_total"], fixed["nvml_used_total"]) >= 0.90, table
    assert not expandable["alert"], (table, expandable)
    assert expandable["frag"] < 0.25, table
