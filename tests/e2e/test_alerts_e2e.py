"""End to end with the real prometheus-alertmanager and amtool binaries: CPU training jobs with
an injected slowdown raise drift / straggler alerts in Alertmanager; a healthy job raises none.
Detector windows are shrunk to test scale through the collector's YAML config."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
import yaml

from _alertmanager import AM, AMTOOL, Alertmanager
from _procs import Collector, assert_finished, start_trainer, trainer_env

pytestmark = pytest.mark.skipif(not (AM and AMTOOL), reason="needs prometheus-alertmanager and amtool")

# Test-scale windows: 5-step blocks; verdicts from step 60 (10 warm-up + 20 lag + 30 baseline);
# the lag (4 blocks) is at least min_duration (4 blocks) so no slowed block enters the baseline
# before the alarm. Warning at +5% against the injected +10%.
DETECTION = {"warmup_steps": 10, "eval_interval_s": 0.5,
             # ~0.16 s steps: horizons of a few seconds (the defaults are minutes)
             "drift": {"bucket_s": 0.8, "min_bucket_steps": 3, "warmup_s": 1, "settle_s": 4,
                       "critical_window_s": 2.4, "warning_window_s": 3, "info_window_s": 5,
                       "clear_s": 1.6, "z": 3},
             "straggler": {"block_steps": 5, "window_blocks": 6, "min_blocks": 5}}
# A tiny model whose step is mostly a fixed sleep: on a loaded 2-core CI machine the compute
# part of the default demo model jitters by +-30%, far more than the 10% shift under test.
# With 0.08 s of sleep the healthy jobs' 5-step medians moved +-3% under a busy-loop load;
# 0.15 s halves the compute share.
SMALL = ("--step-sleep-s", "0.15", "--d-model", "16", "--layers", "1", "--batch", "2", "--seq", "8")
STEPS, SLOW_FROM = 110, 65


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Alertmanager, a collector, and the three jobs, run at the same time (one trainer each:
    their steps are mostly sleep, so they hardly slow each other down)."""
    tmp = tmp_path_factory.mktemp("alerts")
    am = Alertmanager(tmp)
    cfg = tmp / "collector.yml"
    # The recording (stepwatch replay input) is kept for diagnosing a failure.
    cfg.write_text(yaml.safe_dump({"detection": DETECTION, "alertmanager_url": am.url,
                                   "record": str(tmp / "record.jsonl")}))
    col = Collector(tmp, ["--config", str(cfg)]).start()
    args = ("--steps", str(STEPS), *SMALL)
    # The two-rank job first, and the others once both its ranks are stepping: its start (torchrun,
    # two interpreters importing torch, gloo) is CPU-heavy, and beside a CPU burner it slowed the
    # single jobs' settle window (a fresh-clone run: "slowed" at 154-171 ms while settling, so its
    # +10% stood under z spreads of that wobble and was not raised).
    jobs = {"strag": start_trainer(trainer_env(tmp, col.grpc, "strag"), *args, "--slow-from-step", "50",
                                   "--slow-factor", "1.5", "--slow-rank", "1", nproc=2)}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and col.job_steps().get("strag", 0) < 2 * 5:
        time.sleep(0.2)
    jobs.update({"healthy": start_trainer(trainer_env(tmp, col.grpc, "healthy"), *args),
                 "slowed": start_trainer(trainer_env(tmp, col.grpc, "slowed"), *args,
                                         "--slow-from-step", str(SLOW_FROM), "--slow-factor", "1.1")})
    try:
        for name, proc in jobs.items():
            out, _ = proc.communicate(timeout=120)
            assert_finished(proc, f"{name}: {out}", ranks=2 if name == "strag" else 1)
        yield am, col, tmp
    finally:
        for proc in jobs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        col.kill()
        am.stop()


def test_slowed_job_raises_drift_and_healthy_job_none(stack):
    am, col, tmp = stack
    alert = am.wait_for(alertname="StepwatchThroughputDrift", training_job="slowed", rank=0)
    assert alert["labels"]["source"] == "collector", alert
    summary = alert["annotations"]["summary"]
    assert ("vs this job's level settled at" in summary or "vs the level before" in summary) and "since step" in summary, summary
    # the onset, and where the episode began when a further change came on it ("since step 64 (a
    # further change: the episode began at step 58 at +7.6%)": a CI run)
    onsets = [int(x.replace(",", "")) for x in re.findall(r"(?:since step|began at step) ([\d,]+)", summary)]
    assert onsets and all(SLOW_FROM - 10 <= s <= SLOW_FROM + 15 for s in onsets), summary
    assert int(alert["annotations"]["step"]) >= SLOW_FROM - 5
    assert col.value("stepwatch_alert_active", alertname="StepwatchThroughputDrift", training_job="slowed") == 1
    listed = col.api("/api/alerts")["alerts"]
    assert any(a["job"] == "slowed" and a["state"] == "firing" and a["step"] >= SLOW_FROM - 5 for a in listed), listed
    time.sleep(1.0)  # evaluation ticks after the healthy job's last step
    assert not [a for a in am.amtool_alerts() if a["labels"]["training_job"] == "healthy"]
    assert not [a for a in listed if a["job"] == "healthy"], [(a["step"], a["summary"]) for a in listed]


def test_two_rank_job_with_one_slow_rank_names_the_straggler(stack):
    am, col, tmp = stack
    alert = am.wait_for(alertname="StepwatchStragglerRank", training_job="strag")
    assert alert["labels"]["rank"] == "1", alert
    assert alert["annotations"]["summary"].startswith("rank 1 is a straggler"), alert
    assert not [a for a in am.amtool_alerts() if a["labels"]["alertname"] == "StepwatchStragglerRank"
                and a["labels"]["rank"] == "0"]


def test_the_live_recording_replays_to_the_same_alerts(stack):
    """The collector recorded the three real jobs (record: in its config); `stepwatch replay`
    on that file and the same config gives the alerts the collector raised live."""
    am, col, tmp = stack
    am.wait_for(alertname="StepwatchStragglerRank", training_job="strag")
    live = {(a["alertname"], a["job"], a["rank"], a["severity"], a["step"])
            for a in col.api("/api/alerts")["alerts"] if a["fired_at"]}
    run = subprocess.run([sys.executable, "-m", "stepwatch.collector.tools", "replay",
                          str(tmp / "record.jsonl"), "--config", str(tmp / "collector.yml"),
                          "--format", "json"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    *episodes, count = map(json.loads, run.stdout.splitlines())
    assert count == {"kind": "count", "episodes": len(episodes)}
    replayed = {(a["alertname"], a["job"], a["rank"], a["severity"], a["step"]) for a in episodes}
    assert {("StepwatchThroughputDrift", "slowed"), ("StepwatchStragglerRank", "strag")} <= \
        {(a[0], a[1]) for a in live}
    assert replayed == live
