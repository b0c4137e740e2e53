"""A rank whose GPU does more work in a host-bound NCCL DDP job is named from the always-on GPU
activity (NVML GPM, collector/detect/_activity.py), at the defaults.

bench/real_job.py at size m (the ~40-47 ms transformer, `loss.item()` every step) under
torchrun on two GPUs, against its own recording collector, both at their defaults; from 200 s
on, rank 1 runs extra bf16 GEMMs in its backward (`--inject gemm_backward --inject-rank 1`,
15% of its step). On this job the host sets the pace: rank 0 waits for rank 1's gradient
buckets inside its own backward, so the phase times of both ranks grow alike, and the phase
rule alone did not name rank 1 live (2 x H200, bench/results/real_h200r.md); the GPM counters
did (rank 1's tensor activity 0.21 -> 0.26, rank 0's unchanged).

Passes when StepwatchStragglerRank names rank 1, and only rank 1, within 60 s after the
change, its summary saying the GPU is busier (or its why leading with the GPU's extra work),
and nothing of any kind is raised before the change. Skips without two GPUs, or where NVML's GPM counters are not supported (the rule has
nothing to read). Software only: no GPU setting is touched. JSON, the step clocks and the
recording under $OUT."""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
import yaml

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

from _procs import trainer_env  # noqa: E402

from stepwatch.collector.ingest._record import read_record  # noqa: E402

JOB = pathlib.Path(__file__).resolve().parents[2] / "bench" / "real_job.py"
SECONDS, AT = 290, 200  # the rule's reference: its first minute after 60 s; the change at 200 s
LIMIT_S = 60.0


def _ts(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


@pytest.mark.timeout(SECONDS + 400)
def test_a_rank_whose_gpu_does_more_work_is_named_from_its_gpu_activity(tmp_path, collector_factory):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices")
    name = "gpu_activity"
    record = tmp_path / f"{name}.jsonl"
    cfg = tmp_path / f"{name}.yml"
    cfg.write_text(yaml.safe_dump({"record": str(record)}))
    col = collector_factory("--config", str(cfg))
    env = trainer_env(tmp_path, col.grpc, name)
    del env["STEPWATCH_FLUSH_INTERVAL_S"]  # the default batch interval
    env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0,1")
    clocks = tmp_path / f"{name}.steps.r{{rank}}.json"
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          str(JOB), "--size", "m", "--duration-s", str(SECONDS), "--job", name,
                          "--steps-out", str(clocks), "--inject", "gemm_backward", "--inject-rank", "1",
                          "--inject-after-s", str(AT)], env=env, capture_output=True, text=True,
                         timeout=SECONDS + 240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    own = {r: json.loads(pathlib.Path(str(clocks).replace("{rank}", str(r))).read_text()) for r in (0, 1)}
    for r in (0, 1):
        col.wait_value("stepwatch_steps_total", len(own[r]["step_s"]), training_job=name, rank=str(r))
    time.sleep(3)
    events = list(read_record(record.read_text().splitlines()))
    gpm = [s for ev in events if ev.kind == "batch" for s in ev.batch.gpu_samples if s.HasField("sm_active_ratio")]
    alerts = [a for a in col.api("/api/alerts")["alerts"] if a["job"] == name]
    changed = own[1]["injected"]["time"]
    out = pathlib.Path(os.environ.get("OUT") or tmp_path)
    (out / record.name).write_bytes(record.read_bytes())
    for r in (0, 1):
        (out / f"{name}.steps.r{r}.json").write_text(json.dumps(own[r]))
    result = {"devices": [torch.cuda.get_device_name(i) for i in range(2)], "torch": torch.__version__,
              "changed_at": changed, "gpm_samples": len(gpm),
              "alerts": [(a["alertname"], a["rank"], a["severity"], round(_ts(a["starts_at"]) - changed, 1),
                          round(_ts(a["fired_at"]) - changed, 1) if a["fired_at"] else None, a["summary"])
                         for a in alerts]}
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    if not gpm:
        pytest.skip("no GPM counters on these GPUs: the GPU-activity rule has nothing to read")
    early = [a for a in alerts if a["fired_at"] and _ts(a["fired_at"]) < changed]
    assert not early, early
    named = [a for a in alerts if a["alertname"] == "StepwatchStragglerRank"]
    assert [a["rank"] for a in named] == [1], result["alerts"]
    assert _ts(named[0]["fired_at"]) - changed <= LIMIT_S, result["alerts"]
    # the summary joins each rule's evidence while it holds (it may end on the phases' alone);
    # the why leads with the GPU's extra work for a rank whose device did more
    assert "GPU is busier" in named[0]["summary"] or named[0]["diagnosis"].startswith("its GPU did more work"), \
        (named[0]["summary"], named[0]["diagnosis"])
