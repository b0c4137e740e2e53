"""A profiler window that leaves the job slower, end to end on CPU: the trainer's test hook
(``--slow-after-session``) makes every step after the agent's second profiler session (the
first scheduled window after the warm-up one) 0.04 s longer, as a lasting after-effect would.
The agent's own check sees it and drops windows (CPU activity only here, so profiling goes
off), says so in an event, exports the after-effect ratio and counts the slow spell in its
overhead ratio; the collector raises StepwatchProfilerOverhead naming the window, never
throughput drift. A job at the defaults beside it runs no profiler session at all (windows
on demand) and raises nothing."""

from __future__ import annotations

import time

import yaml

from _procs import Collector, assert_finished, start_trainer, trainer_env

# ~0.065 s steps: drift armed after ~5 s (warm-up 1 s + settle 4 s), the window at step 256
# (~17 s), the agent's check over two 5-s spans from 1 s after it (~11 s, before step 512).
# Levels far above a loaded CI host's wobble (a +2.2% drift of both jobs at the same seconds was
# raised at the defaults' 3%, and the window the collector then asked for became the trainer's
# second session) and far below the +60% under test.
DETECTION = {"warmup_steps": 10, "eval_interval_s": 0.5,
             "drift": {"bucket_s": 0.8, "min_bucket_steps": 3, "warmup_s": 1, "settle_s": 4,
                       "critical_window_s": 2.4, "warning_window_s": 3, "info_window_s": 5,
                       "clear_s": 1.6, "z": 3, "info_ratio": 0.15, "warning_ratio": 0.25,
                       "critical_ratio": 0.35}}
SMALL = ("--step-sleep-s", "0.06", "--d-model", "16", "--layers", "1", "--batch", "2", "--seq", "8")
STEPS = 420


def test_a_window_that_leaves_the_job_slower_is_backed_off_and_raised_as_overhead(tmp_path):
    cfg = tmp_path / "collector.yml"
    cfg.write_text(yaml.safe_dump({"detection": DETECTION, "record": str(tmp_path / "record.jsonl")}))
    col = Collector(tmp_path, ["--config", str(cfg)]).start()
    try:
        slowed = start_trainer(
            trainer_env(tmp_path, col.grpc, "aftereffect", STEPWATCH_WINDOWS="scheduled",
                        STEPWATCH_WINDOW_EVERY_STEPS=256, STEPWATCH_OVERHEAD_BUDGET=0.5,
                        STEPWATCH_AFTEREFFECT_SPAN_S=5),
            "--steps", str(STEPS), *SMALL, "--slow-after-session", "2", "--slow-after-session-s", "0.04")
        healthy = start_trainer(trainer_env(tmp_path, col.grpc, "defaults"), "--steps", str(STEPS), *SMALL)
        for name, proc in (("aftereffect", slowed), ("defaults", healthy)):
            out, _ = proc.communicate(timeout=180)
            assert_finished(proc, f"{name}: {out}")
            col.wait_value("stepwatch_steps_total", STEPS, training_job=name)
        time.sleep(2)

        # the agent: one check found the after-effect, profiling went off (no window after it)
        assert col.value("stepwatch_agent_events_total", training_job="aftereffect", kind="window_aftereffect") == 1
        ratio = col.value("stepwatch_agent_window_aftereffect_ratio", training_job="aftereffect")
        assert 1.3 <= ratio <= 2.0, ratio  # 0.04 s more on ~0.07 s steps
        assert col.value("stepwatch_windows_total", training_job="aftereffect") == 2  # warm-up, then the one at 256
        # the slow spell (two 5-s spans and the 1-s settle at ~+40%) counts as the window's cost:
        # ~4 s over a ~35-s job, far above what one CPU window costs by itself (~0.02 s)
        overhead = col.value("stepwatch_agent_overhead_ratio", training_job="aftereffect")
        assert overhead >= 0.05, overhead

        alerts = [a for a in col.api("/api/alerts")["alerts"] if a["job"] == "aftereffect"]
        assert {a["alertname"] for a in alerts} == {"StepwatchProfilerOverhead"}, alerts
        assert "profiler window ending at step" in alerts[0]["summary"], alerts[0]
        # the agent's back-off is in the episode (here the job stays slow: the hook is not the
        # profiler's, so the episode stays open and says the back-off did not end it)
        assert "; the agent backed off at " in alerts[0]["summary"] \
            and "profiling is off in this process" in alerts[0]["summary"], alerts[0]
        assert alerts[0]["state"] == "firing", alerts[0]

        # the job at the defaults: no profiler session, nothing raised
        assert not col.value("stepwatch_windows_total", training_job="defaults"), "a window ran on demand unasked"
        assert [a for a in col.api("/api/alerts")["alerts"] if a["job"] == "defaults"] == []
    finally:
        col.kill()
