"""A slow rank in a real NCCL DDP job is named at the default settings, on two GPUs and on four:
every agent and the collector at their defaults (no forced window cadence, the default phase
budget and batch interval), so only the always-on signals (phase times, data-loader wait) can
name it in time. Variants, one after the other, each its own job and collector: healthy (no
alert of any kind); from step FROM on, rank 1 runs extra GEMMs in its backward pass, or its
data loader is slower, or its training thread is busy on the host before forward.
StepwatchStragglerRank must name rank 1, and only rank 1, within 60 s of the change. Software
only: no GPU setting is touched. Skips without enough GPUs. Prints a table; JSON and the
recordings under $OUT."""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import time

import pytest
import yaml

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

from _procs import start_trainer, trainer_env  # noqa: E402

from stepwatch.collector.ingest._record import read_record  # noqa: E402

STEPS, FROM = 3000, 1000  # ~12 ms steps on an H100: the change ~12 s in, ~24 s after it
# TinyLM at the size whose GEMMs cost the step (bench/diagnosis.py on an H100: 1-2 ms of GEMMs
# were +8-18%); at train.py's default size the GPUs idle 95% of the time and 4 ms of GEMMs on
# one rank made the job 3% slower (no straggler; tests/data/real/phases/h100g_2gpu_tiny_gemm)
MODEL = ("--d-model", "512", "--layers", "4", "--batch", "16", "--seq", "256")
VARIANTS = {
    "healthy": (),
    "gemm": ("--cause", "backward", "--cause-ms", "4", "--cause-rank", "1", "--cause-from-step", str(FROM)),
    "loader": ("--slow-from-step", str(FROM), "--slow-factor", "1.5", "--slow-rank", "1"),
    "host": ("--cause", "host_busy", "--cause-ms", "4", "--cause-rank", "1", "--cause-from-step", str(FROM)),
}
LIMIT_S = 60.0


def _run(tmp_path, collector_factory, job: str, world: int, *extra):
    """One ``world``-rank NCCL job (STEPS steps) against its own recording collector, both at
    their defaults: (steps by (rank, step), alerts of the job)."""
    record = tmp_path / f"{job}.jsonl"
    cfg = tmp_path / f"{job}.yml"
    cfg.write_text(yaml.safe_dump({"record": str(record)}))
    col = collector_factory("--config", str(cfg))
    env = trainer_env(tmp_path, col.grpc, job)
    del env["STEPWATCH_FLUSH_INTERVAL_S"]  # the default batch interval too
    env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(world))))
    proc = start_trainer(env, "--device", "cuda", "--steps", str(STEPS), *MODEL, *extra, nproc=world)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-4000:]
    for rank in range(world):
        col.wait_value("stepwatch_steps_total", STEPS, training_job=job, rank=str(rank))
    time.sleep(3)
    batches = [ev for ev in read_record(record.read_text().splitlines()) if ev.kind == "batch"]
    steps = {(ev.hello.rank, s.step): s for ev in batches for s in ev.batch.steps}
    alerts = [a for a in col.api("/api/alerts")["alerts"] if a["job"] == job]
    if os.environ.get("OUT"):  # the recording, for replay in CI
        (pathlib.Path(os.environ["OUT"]) / record.name).write_bytes(record.read_bytes())
    return steps, alerts


def _median_ms(steps, rank: int, lo: int, hi: int) -> float:
    got = sorted(steps[(rank, k)].duration_s for k in range(lo, hi) if (rank, k) in steps)
    return 1e3 * got[len(got) // 2] if got else float("nan")


@pytest.mark.timeout(900)  # four jobs: 292-313 s on H100s, over the suite's 300 s
@pytest.mark.parametrize("world", [2, 4])
def test_a_slow_rank_is_named_at_defaults(tmp_path, collector_factory, world):
    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} CUDA devices")
    out = pathlib.Path(os.environ.get("OUT") or tmp_path)
    result = {"devices": [torch.cuda.get_device_name(i) for i in range(world)], "torch": torch.__version__,
              "nccl": str(torch.cuda.nccl.version()), "steps": STEPS, "from": FROM}
    found = {}
    for name, extra in VARIANTS.items():
        steps, alerts = _run(tmp_path, collector_factory, f"nccl{world}-{name}", world, *extra)
        onset = steps[(1, FROM)].end_time_s
        strag = [a for a in alerts if a["alertname"] == "StepwatchStragglerRank"]
        delay = [datetime.datetime.fromisoformat(a["fired_at"].replace("Z", "+00:00")).timestamp() - onset
                 for a in strag if a.get("fired_at")]
        before = [_median_ms(steps, r, FROM - 600, FROM) for r in range(world)]
        after = [_median_ms(steps, r, FROM + 100, STEPS) for r in range(world)]
        print(f"\n{world} GPUs, {name}: median step ms per rank before {before}, after {after}; "
              f"seconds from the change to the straggler alert: {delay}")
        for a in alerts:
            print("  alert:", a["alertname"], "rank", a["rank"], a["summary"], "| why:", a.get("diagnosis"))
        result[name] = {"step_ms_before": before, "step_ms_after": after, "seconds_to_straggler_alert": delay,
                        "alerts": [{k: a.get(k) for k in ("alertname", "rank", "summary", "diagnosis", "fired_at")}
                                   for a in alerts]}
        found[name] = (alerts, delay)
    (out / f"nccl_straggler_{world}gpu.json").write_text(json.dumps(result, indent=1))
    assert found["healthy"][0] == [], found["healthy"][0]
    for name in ("gemm", "loader", "host"):
        alerts, delay = found[name]
        strag = [a for a in alerts if a["alertname"] == "StepwatchStragglerRank"]
        assert [a["rank"] for a in strag] == [1], (name, alerts)
        assert delay and delay[0] <= LIMIT_S, (name, delay)
