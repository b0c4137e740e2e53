"""Straggler under synchronous data parallelism on one GPU: two DDP ranks share cuda:0 (gloo with
CUDA tensors; NCCL refuses two ranks on one device). From step 150 rank 1 runs extra GEMMs in
its backward pass (software only). Both ranks keep the same step time; the profiler windows
show rank 1 computing longer, and the collector must name it; the same job without the extra
work raises nothing. Prints a table of the windows' per-rank figures; JSON under $OUT."""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import statistics
import time

import pytest
import yaml

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

from _procs import start_trainer, trainer_env  # noqa: E402

from stepwatch.collector.ingest._record import read_record  # noqa: E402

STEPS, CAUSE_FROM = 900, 150
ARGS = ("--device", "cuda", "--backend", "gloo", "--same-gpu", "--steps", str(STEPS))
CAUSE = ("--cause", "backward", "--cause-ms", "8", "--cause-rank", "1", "--cause-from-step", str(CAUSE_FROM))


def _run(tmp_path, collector_factory, job, *extra, base=ARGS):
    """Run the 2-rank job ``base + extra`` (STEPS steps) against its own recording collector."""
    record = tmp_path / f"{job}.jsonl"
    cfg = tmp_path / f"{job}.yml"
    cfg.write_text(yaml.safe_dump({"record": str(record), "detection": {"eval_interval_s": 0.5}}))
    col = collector_factory("--config", str(cfg))
    env = trainer_env(tmp_path, col.grpc, job, STEPWATCH_WINDOWS="scheduled", STEPWATCH_WINDOW_EVERY_STEPS=64, STEPWATCH_OVERHEAD_BUDGET=0.5)
    began = time.time()
    proc = start_trainer(env, *base, *extra, nproc=2)
    out, _ = proc.communicate(timeout=420)
    assert proc.returncode == 0, out[-4000:]
    for rank in (0, 1):
        col.wait_value("stepwatch_steps_total", STEPS, training_job=job, rank=str(rank))
    time.sleep(2)
    batches = [ev for ev in read_record(record.read_text().splitlines()) if ev.kind == "batch"]
    steps = {(ev.hello.rank, s.step): s for ev in batches for s in ev.batch.steps}
    windows = sorted(((ev.hello.rank, w) for ev in batches for w in ev.batch.windows), key=lambda x: x[1].first_step)
    alerts = [a for a in col.api("/api/alerts")["alerts"] if a["job"] == job]
    if os.environ.get("OUT"):  # the recording, for replay in CI (tests/data/replay)
        (pathlib.Path(os.environ["OUT"]) / record.name).write_bytes(record.read_bytes())
    return col, steps, windows, alerts, began


def _table(name, steps, windows):
    rows = []
    for rank, w in windows:
        n = w.last_step - w.first_step + 1
        before = [steps[(rank, k)].duration_s for k in range(max(1, w.first_step - 40), w.first_step - 4)
                  if (rank, k) in steps]
        step_ms = 1e3 * statistics.median(before) if before else float("nan")
        rows.append({"job": name, "rank": rank, "first_step": w.first_step, "compute_ms": 1e3 * w.compute_s / n,
                     "communication_ms": 1e3 * w.communication_s / n, "memcpy_ms": 1e3 * w.memcpy_s / n,
                     "window_step_ms": 1e3 * w.breakdown.step_time_s, "step_ms_before": step_ms,
                     "gpu_idle": w.gpu_idle_ratio})
    print(f"\n{name}: rank first_step compute_ms comm_ms memcpy_ms window_step_ms step_ms gpu_idle")
    for r in rows:
        print(f"  {r['rank']} {r['first_step']:>5} {r['compute_ms']:8.2f} {r['communication_ms']:7.2f} "
              f"{r['memcpy_ms']:7.2f} {r['window_step_ms']:8.2f} {r['step_ms_before']:8.2f} {r['gpu_idle']:.2f}")
    return rows


def test_slow_rank_sharing_the_gpu_is_named_and_healthy_raises_nothing(tmp_path, collector_factory):
    out = pathlib.Path(os.environ.get("OUT") or tmp_path)
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    col, steps, windows, alerts, began = _run(tmp_path, collector_factory, "gpustrag", *CAUSE)
    result["skewed"] = _table("skewed", steps, windows)
    strag = [a for a in alerts if a["alertname"] == "StepwatchStragglerRank"]
    onset = steps[(1, CAUSE_FROM)].end_time_s
    result["skewed_alerts"] = [{k: a.get(k) for k in ("alertname", "rank", "summary", "fired_at", "diagnosis")}
                               for a in alerts]
    result["seconds_from_change_to_alert"] = [
        datetime.datetime.fromisoformat(a["fired_at"].replace("Z", "+00:00")).timestamp() - onset
        for a in strag if a.get("fired_at")]
    col2, steps2, windows2, alerts2, _ = _run(tmp_path, collector_factory, "gpubal")
    result["balanced"] = _table("balanced", steps2, windows2)
    result["balanced_alerts"] = [{k: a.get(k) for k in ("alertname", "rank", "summary")} for a in alerts2]
    (out / "straggler_gpu.json").write_text(json.dumps(result, indent=1))
    for a in alerts + alerts2:
        print("alert:", a["job"], a["alertname"], a["rank"], a["summary"])
    print("seconds from the change to the straggler alert:", result["seconds_from_change_to_alert"])
    assert [a["rank"] for a in strag] == [1], alerts
    assert "ms/step vs median" in strag[0]["summary"], strag
    assert not [a for a in alerts2 if a["alertname"] == "StepwatchStragglerRank"], alerts2
