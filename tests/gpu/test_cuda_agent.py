"""On a CUDA GPU: allocator, NVML and CUDA-event step times as the collector exports them.

Prints a short table (device, measured vs exported) for the closing note of a GPU run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import pathlib

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

from _procs import trainer_env  # noqa: E402

from stepwatch.collector.ingest._record import read_record  # noqa: E402
from stepwatch.proto.stepwatch.v1 import agent_pb2  # noqa: E402

STEPS = 120


def test_cuda_job_metrics_match_ground_truth(collector_factory, tmp_path):
    record = tmp_path / "record.jsonl"
    col = collector_factory("--record", str(record))
    env = trainer_env(tmp_path, col.grpc, "gpujob")
    truth_path = tmp_path / "truth.json"
    run = subprocess.run([sys.executable, str(pathlib.Path(__file__).parent / "cuda_job.py"),
                          str(truth_path), str(STEPS)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    truth = json.loads(truth_path.read_text())
    labels = dict(training_job="gpujob", rank=0)
    try:
        col.wait_value("stepwatch_steps_total", STEPS, **labels)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\ntrainer stderr:\n{run.stderr[-4000:]}") from None

    # Step times from CUDA events vs a synchronized wall-clock measurement of the same steps.
    batches = [ev.batch for ev in read_record(record.read_text().splitlines()) if ev.kind == "batch"]
    steps = {s.step: s for b in batches for s in b.steps}
    a, b = truth["window"]
    event_sum = sum(steps[k].duration_s for k in range(a + 1, b + 1))
    clocks = {agent_pb2.StepClock.Name(steps[k].clock) for k in range(a + 1, b + 1)}
    step_err = abs(event_sum - truth["window_wall_s"]) / truth["window_wall_s"]

    # Allocator: every exported sample vs the trainer's own memory_stats at the same step.
    fields = ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes")
    log = truth["memory_log"]
    matched = mismatched = 0
    for rec in (a for b in batches for a in b.allocator):
        after = [entry for entry in log if entry[0] >= rec.time_s]
        assert after and after[0][0] - rec.time_s < 0.05, "no trainer sample right after the agent's"
        if [getattr(rec, f) for f in fields] == after[0][1:]:
            matched += 1
        else:
            mismatched += 1
    last = log[-1]
    allocated = col.value("stepwatch_allocator_allocated_bytes", **labels)
    reserved = col.value("stepwatch_allocator_reserved_bytes", **labels)
    ms = {"allocated_bytes.all.current": last[1], "reserved_bytes.all.current": last[2]}
    alloc_err = abs(allocated - last[1]) / last[1]

    # NVML: exported device memory vs NVML read directly by the trainer.
    used = col.value("stepwatch_gpu_memory_used_bytes", **labels)
    nvml_err = abs(used - truth["nvml_used_bytes_after"]) / truth["nvml_used_bytes_after"]
    gpu_labels = [s.labels for s in col.samples() if s.name == "stepwatch_gpu_memory_used_bytes"][0]

    rows = [("quantity", "exported", "ground truth", "rel. error"),
            ("step time sum, steps %d..%d (s)" % (a + 1, b), f"{event_sum:.4f}",
             f"{truth['window_wall_s']:.4f}", f"{step_err:.4%}"),
            ("allocator samples equal to memory_stats", f"{matched}", f"{matched + mismatched}", ""),
            ("allocated, last sample vs end (B)", f"{allocated:.0f}", f"{ms['allocated_bytes.all.current']}", f"{alloc_err:.4%}"),
            ("reserved, last sample vs end (B)", f"{reserved:.0f}", f"{ms['reserved_bytes.all.current']}", ""),
            ("NVML memory used (B)", f"{used:.0f}", f"{truth['nvml_used_bytes_after']}", f"{nvml_err:.4%}")]
    table = "\n".join("  ".join(str(c).ljust(34 if i == 0 else 16) for i, c in enumerate(r)) for r in rows)
    print(f"\nGPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}\n{table}")
    out = os.environ.get("OUT")
    if out:
        pathlib.Path(out, "gpu_table.txt").write_text(table + "\n")

    assert clocks == {"STEP_CLOCK_CUDA_EVENT"}
    assert step_err < 0.02
    assert matched >= 1 and mismatched == 0
    assert nvml_err < 0.05
    assert gpu_labels["UUID"] == truth["uuid"] and gpu_labels["modelName"]
    for name in ("stepwatch_gpu_utilization_ratio", "stepwatch_gpu_power_watts",
                 "stepwatch_gpu_temperature_celsius", "stepwatch_gpu_sm_clock_hertz"):
        assert col.value(name, **labels) is not None, name
