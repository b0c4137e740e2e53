"""NVML GPM counters on a Hopper (or newer) GPU, as the collector receives and exports them:
high SM and tensor activity during a bf16 GEMM loop, low while the job idles. Prints a table."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

from _procs import trainer_env  # noqa: E402

from stepwatch.collector.ingest._record import read_record  # noqa: E402

FIELDS = ("sm_active_ratio", "sm_occupancy_ratio", "tensor_active_ratio", "tensor_hmma_active_ratio",
          "dram_active_ratio", "fp32_active_ratio", "pcie_tx_bytes_per_second", "nvlink_tx_bytes_per_second")


def _median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else None


def test_gpm_counters_follow_the_work(collector_factory, tmp_path):
    if torch.cuda.get_device_capability(0)[0] < 9:
        pytest.skip("GPM needs Hopper or newer")
    record = tmp_path / "record.jsonl"
    col = collector_factory("--record", str(record))
    phases = tmp_path / "phases.json"
    run = subprocess.run([sys.executable, str(pathlib.Path(__file__).parent / "gpm_job.py"), str(phases), "8", "5"],
                         env=trainer_env(tmp_path, col.grpc, "gpmjob"), capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-4000:]
    col.wait_value("stepwatch_agent_connected", 0, training_job="gpmjob")  # the last batch is in
    p = json.loads(phases.read_text())
    events = [ev for ev in read_record(record.read_text().splitlines()) if ev.kind == "batch"]
    samples = [g for ev in events for g in ev.batch.gpu_samples]
    told = [e.message for ev in events for e in ev.batch.events if e.kind == "nvml_gpm_unsupported"]

    def during(name, field, margin=1.0):
        lo, hi = p[name]
        return _median([getattr(g, field) for g in samples if lo + margin <= g.time_s <= hi - margin
                        and g.HasField(field)])

    rows = [(f, during("busy", f), during("idle", f)) for f in FIELDS]
    print("\nGPM on", torch.cuda.get_device_name(0), "| events:", told)
    print(f"{'counter':<28} {'GEMM loop':>12} {'idle':>12}")
    for f, busy, idle in rows:
        print(f"{f:<28} {busy if busy is not None else float('nan'):>12.4g} {idle if idle is not None else float('nan'):>12.4g}")
    out = pathlib.Path(os.environ.get("OUT") or tmp_path)
    (out / "gpm_gpu.json").write_text(json.dumps({"device": torch.cuda.get_device_name(0), "events": told,
                                                  "rows": rows}, indent=1))
    busy = dict((f, b) for f, b, _ in rows)
    idle = dict((f, i) for f, _, i in rows)
    assert busy["sm_active_ratio"] is not None, f"no GPM samples; events: {told}"
    assert busy["sm_active_ratio"] > 0.5 and idle["sm_active_ratio"] < 0.1, rows
    assert busy["tensor_active_ratio"] > 0.3 and idle["tensor_active_ratio"] < 0.05, rows
    assert 0 < busy["sm_occupancy_ratio"] <= 1 and 0 <= busy["dram_active_ratio"] <= 1, rows
    text = col.scrape_text()
    for name in ("stepwatch_gpu_sm_active_ratio", "stepwatch_gpu_tensor_active_ratio",
                 "stepwatch_gpu_dram_active_ratio", "stepwatch_gpu_pcie_rx_bytes_per_second"):
        assert name in text, name
