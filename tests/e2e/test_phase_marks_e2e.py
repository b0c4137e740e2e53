"""Phase marks end to end: a real CPU training job whose evaluation passes run inside
``agent.pause("eval")`` reports them over real gRPC; the collector counts them as
``stepwatch_pauses_total{kind="eval"}``, leaves the marked steps out of drift (no stall guessed
for them, no alert)."""

from __future__ import annotations

import yaml

from _procs import Collector, start_trainer, trainer_env

DETECTION = {"warmup_steps": 10, "eval_interval_s": 0.5,
             # ~0.06 s steps: horizons of seconds (the defaults are minutes)
             "drift": {"bucket_s": 0.5, "min_bucket_steps": 3, "warmup_s": 2, "settle_s": 6,
                       "critical_window_s": 2, "warning_window_s": 3, "info_window_s": 6,
                       "clear_s": 1, "z": 3}}
SMALL = ("--step-sleep-s", "0.05", "--d-model", "16", "--layers", "1", "--batch", "2", "--seq", "8")


def test_marked_evaluations_are_counted_by_kind_and_never_drift(tmp_path):
    cfg = tmp_path / "collector.yml"
    cfg.write_text(yaml.safe_dump({"detection": DETECTION}))
    col = Collector(tmp_path, ["--config", str(cfg)]).start()
    try:
        # 150 steps, an evaluation of 0.6 s (about 10x a step) after every 25th: the step
        # after each (26, 51, ..., 126; the one after step 150 never comes) is marked.
        proc = start_trainer(trainer_env(tmp_path, col.grpc, "evaljob"), "--steps", "150", *SMALL,
                             "--eval-every", "25", "--eval-s", "0.6")
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
        col.wait_value("stepwatch_steps_total", 150, training_job="evaljob", rank=0)
        assert col.value("stepwatch_pauses_total", training_job="evaljob", rank=0, kind="eval") == 5
        # Unmarked, each evaluation would be a one-step stall; marked, none is guessed.
        assert (col.value("stepwatch_pauses_total", training_job="evaljob", rank=0, kind="stall") or 0) <= 1
        alerts = [a for a in col.api("/api/alerts")["alerts"] if a["job"] == "evaljob"]
        assert alerts == [], [(a["alertname"], a["summary"]) for a in alerts]
    finally:
        col.kill()
