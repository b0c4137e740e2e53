"""A healthy 2-GPU NCCL DDP job (bench/real_job.py, the ~40 ms transformer, under torchrun)
against its own recording collector, both at their defaults, for long enough that the drift
detector is armed (warm-up 60 s + settling 120 s) and has judged minutes of steps:

- at the defaults (windows on demand): nothing raised, of any kind, and no profiler session
  ran (a healthy job runs none);
- with windows on the schedule (``STEPWATCH_WINDOWS=scheduled``, every 30 s, the overhead
  budget at 2% so that it does not stretch them to one per 2-3 minutes as the 0.5% default did
  live: a window every 1,024 steps, ~50 s): nothing raised, and the windows not shown to leave
  the job slower by more than 1%, judged by tests/_aftereffect_verdict.py from the job's own
  clock (host time after ``loss.item()``) around each window against the no-window job's
  clock at the same steps: each window's cost, and a level that steps up after the first one
  and stays. One 5-minute job resolves 2-3% on a real host (its own wander); a run that
  cannot resolve 4% fails as undecided. The 1% target itself is the 10-minute A/B's, arms
  alternated (bench/run_real_device.sh ddp-arms).

Software only: no GPU setting is touched. Skips without two GPUs. Prints a table; JSON, the
step clocks and the recordings under $OUT."""

from __future__ import annotations

import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import pytest
import yaml

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

import _aftereffect_verdict as verdict  # noqa: E402
from _procs import trainer_env  # noqa: E402

from stepwatch.collector.ingest._record import read_record  # noqa: E402

JOB = pathlib.Path(__file__).resolve().parents[2] / "bench" / "real_job.py"
SECONDS = 330  # armed at 180 s of job time: 2.5 minutes judged


def _job(tmp_path, collector_factory, name: str, **env_extra):
    record = tmp_path / f"{name}.jsonl"
    cfg = tmp_path / f"{name}.yml"
    cfg.write_text(yaml.safe_dump({"record": str(record)}))
    col = collector_factory("--config", str(cfg))
    env = trainer_env(tmp_path, col.grpc, name, **env_extra)
    del env["STEPWATCH_FLUSH_INTERVAL_S"]  # the default batch interval
    env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0,1")
    clocks = tmp_path / f"{name}.steps.r{{rank}}.json"
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          str(JOB), "--size", "m", "--duration-s", str(SECONDS), "--job", name,
                          "--steps-out", str(clocks)], env=env, capture_output=True, text=True,
                         timeout=SECONDS + 240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    own = {r: json.loads(pathlib.Path(str(clocks).replace("{rank}", str(r))).read_text())["step_s"]
           for r in (0, 1)}
    for r in (0, 1):
        col.wait_value("stepwatch_steps_total", len(own[r]), training_job=name, rank=str(r))
    time.sleep(3)
    batches = [ev for ev in read_record(record.read_text().splitlines()) if ev.kind == "batch"]
    profiled = {r: sorted(s.step for ev in batches if ev.hello.rank == r for s in ev.batch.steps if s.profiled)
                for r in (0, 1)}
    alerts = [a for a in col.api("/api/alerts")["alerts"] if a["job"] == name]
    out = os.environ.get("OUT")
    if out:
        (pathlib.Path(out) / record.name).write_bytes(record.read_bytes())
        for r in (0, 1):
            (pathlib.Path(out) / f"{name}.steps.r{r}.json").write_text(json.dumps(own[r]))
    return own, profiled, alerts


@pytest.mark.timeout(1500)
def test_a_healthy_two_gpu_job_raises_nothing_and_windows_leave_it_as_fast(tmp_path, collector_factory):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices")
    result = {"devices": [torch.cuda.get_device_name(i) for i in range(2)], "torch": torch.__version__,
              "seconds": SECONDS}
    own, profiled, alerts = _job(tmp_path, collector_factory, "healthy2-defaults")
    result["defaults"] = {"median_ms": [1e3 * statistics.median(own[r][1000:]) for r in (0, 1)],
                          "profiled_steps": [len(profiled[r]) for r in (0, 1)],
                          "alerts": [{k: a.get(k) for k in ("alertname", "rank", "summary")} for a in alerts]}
    own_s, profiled_s, alerts_s = _job(tmp_path, collector_factory, "healthy2-scheduled",
                                       STEPWATCH_WINDOWS="scheduled", STEPWATCH_WINDOW_INTERVAL_S="30",
                                       STEPWATCH_OVERHEAD_BUDGET="0.02")
    judged = {r: verdict.verdict(own_s[r], verdict.runs(profiled_s[r]), own[r]) for r in (0, 1)}
    result["scheduled"] = {"median_ms": [1e3 * statistics.median(own_s[r][1000:]) for r in (0, 1)],
                           "sessions": {r: verdict.runs(profiled_s[r]) for r in (0, 1)},
                           "verdict": judged,
                           "alerts": [{k: a.get(k) for k in ("alertname", "rank", "summary")} for a in alerts_s]}
    text = json.dumps(result, indent=1)
    print("\n" + text)
    if os.environ.get("OUT"):
        (pathlib.Path(os.environ["OUT"]) / "healthy_ddp_gpu.json").write_text(text)
    assert alerts == [], alerts
    assert profiled[0] == profiled[1] == [], "a healthy job at the defaults ran a profiler session"
    assert alerts_s == [], alerts_s
    # the ranks step together: rank 0's clock decides, rank 1's is in the JSON
    assert len(judged[0]["windows"]) >= 4, judged[0]  # a window every ~1,024 steps of ~6,500
    assert judged[0]["undecided"] == [], ("the job wandered too much to resolve 4%", judged[0])
    assert judged[0]["slower"] == [], ("windows left the job slower", judged[0])
