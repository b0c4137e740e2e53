"""End to end with the real prometheus-alertmanager and amtool binaries: CPU training jobs with
an injected slowdown raise drift / straggler alerts in Alertmanager; a healthy job raises none.
Detector windows are shrunk to test scale through the collector's YAML config."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request

import pytest
import yaml

from _procs import Collector, free_port, run_trainer, trainer_env

AM = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
AMTOOL = shutil.which("amtool")
pytestmark = pytest.mark.skipif(not (AM and AMTOOL), reason="needs prometheus-alertmanager and amtool")

DETECTION = {"warmup_steps": 10, "eval_interval_s": 0.5,
             "drift": {"block_steps": 5, "baseline_steps": 100, "baseline_lag_steps": 10,
                       "min_baseline_steps": 30, "min_duration_steps": 20},
             "straggler": {"block_steps": 5, "window_blocks": 6, "min_blocks": 5}}
# A tiny model whose step is mostly a fixed sleep: on a loaded 2-core CI machine the compute
# part of the default demo model jitters by +-30%, far more than the 10% shift under test.
SMALL = ("--step-sleep-s", "0.08", "--d-model", "16", "--layers", "1", "--batch", "2", "--seq", "8")


class Alertmanager:
    def __init__(self, tmp):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = tmp / "am.yml"
        cfg.write_text('route:\n  receiver: "null"\nreceivers:\n  - name: "null"\n')
        self.log = open(tmp / "alertmanager.log", "w")
        self.proc = subprocess.Popen([AM, f"--config.file={cfg}", f"--storage.path={tmp / 'am-data'}",
                                      f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address="],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2).read()
                break
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, (tmp / "alertmanager.log").read_text()
                time.sleep(0.1)

    def alerts(self) -> list[dict]:
        """Active alerts as amtool lists them."""
        out = subprocess.run([AMTOOL, f"--alertmanager.url={self.url}", "alert", "query", "-o", "json"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        return json.loads(out or "[]")

    def wait_for(self, timeout_s: float = 30.0, **labels) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for a in self.alerts():
                if all(a["labels"].get(k) == str(v) for k, v in labels.items()):
                    return a
            time.sleep(0.3)
        raise AssertionError(f"no alert {labels} in Alertmanager; have {[a['labels'] for a in self.alerts()]}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("alerts")
    am = Alertmanager(tmp)
    cfg = tmp / "collector.yml"
    cfg.write_text(yaml.safe_dump({"detection": DETECTION, "alertmanager_url": am.url}))
    col = Collector(tmp, ["--config", str(cfg)]).start()
    yield am, col, tmp
    col.kill()
    am.stop()


def test_slowed_job_raises_drift_and_healthy_job_none(stack):
    am, col, tmp = stack
    args = ("--steps", "140", *SMALL)
    # One after the other: two trainers on 2 cores slow each other down by more than 10%.
    run_trainer(trainer_env(tmp, col.grpc, "healthy"), *args)
    run_trainer(trainer_env(tmp, col.grpc, "slowed"), *args, "--slow-from-step", "80", "--slow-factor", "1.1")
    alert = am.wait_for(alertname="StepwatchThroughputDrift", training_job="slowed", rank=0)
    summary = alert["annotations"]["summary"]
    assert "vs baseline" in summary and "since step" in summary, summary
    since = int(summary.rsplit("since step ", 1)[1].replace(",", ""))
    assert 70 <= since <= 95, summary
    assert int(alert["annotations"]["step"]) >= 80
    assert col.value("stepwatch_alert_active", alertname="StepwatchThroughputDrift", training_job="slowed") == 1
    listed = col.api("/api/alerts")["alerts"]
    assert any(a["job"] == "slowed" and a["state"] == "firing" and a["step"] >= 80 for a in listed), listed
    time.sleep(1.0)  # evaluation ticks after the healthy job's last step
    assert not [a for a in am.alerts() if a["labels"]["training_job"] == "healthy"]
    assert not [a for a in listed if a["job"] == "healthy"], [(a["step"], a["summary"]) for a in listed]


def test_two_rank_job_with_one_slow_rank_names_the_straggler(stack):
    am, col, tmp = stack
    env = trainer_env(tmp, col.grpc, "strag")
    run_trainer(env, "--steps", "120", *SMALL, "--slow-from-step", "60",
                "--slow-factor", "1.5", "--slow-rank", "1", nproc=2)
    alert = am.wait_for(alertname="StepwatchStragglerRank", training_job="strag")
    assert alert["labels"]["rank"] == "1", alert
    assert alert["annotations"]["summary"].startswith("rank 1 is a straggler"), alert
    assert not [a for a in am.alerts() if a["labels"]["alertname"] == "StepwatchStragglerRank"
                and a["labels"]["rank"] == "0"]
