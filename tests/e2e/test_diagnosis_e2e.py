"""Explained alerts end to end on CPU: real training jobs get slower for a known reason from
some step on; the drift alert's diagnosis names that reason first, from the agents' phase times
alone (windows off). A healthy job raises none.

The "early" job takes a CPU profiler window every 512 steps: the alert's request for a window
after the onset is what brings one (its steps are marked profiled and kept out of drift).
"""

from __future__ import annotations

import time

import pytest
import yaml

from _procs import Collector, start_trainer, trainer_env

# z 4, not 3: with a CPU burner beside the suite on 2 cores, the side-by-side jobs' own wobble
# raised a shift before the injected cause (a fresh-clone run with a burner, onsets 325-364).
# transient_s at the horizons' scale (seconds here, 600 s by default): a contention episode
# that cleared counted as a wave the injected cause then had to outlast, past the job's end.
# floor_quantile 0: the medians alone. The floor of 0.5 s buckets (~11 steps: their second
# smallest) of CPU jobs beside a burner moved before the change in one of three fresh-clone runs
# (the dataloader job: an episode from step 255, the cause at 400); this test is of the
# diagnosis, the floor's own tests are tests/collector/detect/test_drift_pair.py and the real
# recordings.
# info 8% / warning 12% / critical 20%, not 3/5/10: at windows of seconds the shared 2-core
# machine's own swings raised the healthy job (CI: +2.5..3.0% for 13 s and more, info; +5% for
# 3 s, warning; twice in a row in one run, its retry included). The injected causes are +12 ms on
# ~43 ms steps (+28%), far above these; the detector's levels at its defaults are judged on the
# real GPU recordings (tests/collector/detect/test_real_corpus.py), not on this machine's noise.
DETECTION = {"warmup_steps": 10, "resolve_hold_s": 600,
             "drift": {"bucket_s": 0.5, "min_bucket_steps": 3, "warmup_s": 2, "settle_s": 6, "critical_window_s": 2, "warning_window_s": 3, "info_window_s": 6, "clear_s": 1, "z": 4,
                       "transient_s": 6, "floor_quantile": 0, "info_ratio": 0.08, "warning_ratio": 0.12, "critical_ratio": 0.2}}
SMALL = ("--step-sleep-s", "0.04", "--d-model", "32", "--layers", "1", "--batch", "4", "--seq", "16")
# The change 300 steps in (~13 s: armed at ~8 s, 2 + 6), 260 steps after it (~11 s: raised once it
# held 2 s).
STEPS, FROM = 560, 300
CAUSES = {"backward": "backward", "dataloader": "data", "optimizer": "optimizer"}
# Phase times at 1% of wall time, not the default 0.1%: the sampler spends its share of the job's
# wall time, and its cost per sample counts the time the 2-core machine's four side-by-side jobs
# spend descheduled inside its hooks, so on a busy run it sampled few steps. A diagnosis compares
# blocks of 8 samples, 3 on each side of the onset (and a guard band before it): 13 s before the
# change and 11 s after it held under 3 in a fresh-clone CI run ("no measured contributor explains
# the +12.8 ms/step; ...; phases: no profiler window from before the onset", decided ""). At 1%
# these jobs sample every step (558 of 560; at 0.1%, 119-128 beside each other here).
PHASES = {"STEPWATCH_PHASE_BUDGET": 0.01}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("diagnosis")
    cfg = tmp / "collector.yml"
    cfg.write_text(yaml.safe_dump({"detection": DETECTION}))
    col = Collector(tmp, ["--config", str(cfg)]).start()
    env = dict(STEPWATCH_WINDOWS=0, **PHASES)  # the phase times alone

    def cause_job(cause):
        return start_trainer(trainer_env(tmp, col.grpc, f"cause-{cause}", **env), "--steps", str(STEPS),
                             *SMALL, "--cause", cause, "--cause-from-step", str(FROM), "--cause-ms", "12")

    procs = {}
    try:
        # The healthy job side by side with the two whose causes are sleeps (the loader's, the
        # optimizer's): they cost the 2 cores little, and with windows off the collector's work on
        # their alerts is a diagnosis each. The backward cause burns CPU, which on a 2-core
        # machine really slows a job beside it (a CI run dated the data-loader job's onset 49
        # steps early, when the backward job reached its step 400 first): it runs after them,
        # alone. (A healthy job the shared machine did slow is run again by its test.) The early
        # job burns too, but only from its step EARLY_FROM, 140 steps (~6 s) after the others'
        # last: it runs beside them, and alone from there.
        procs["healthy"] = start_trainer(trainer_env(tmp, col.grpc, "healthy", **env), "--steps", str(STEPS),
                                         *SMALL)
        procs.update({cause: cause_job(cause) for cause in CAUSES if cause != "backward"})
        procs["early"] = early_job(tmp, col, "early")
        for name, proc in list(procs.items()):
            out, _ = proc.communicate(timeout=240)
            assert proc.returncode == 0, f"{name}: {out[-3000:]}"
        procs["backward"] = cause_job("backward")
        out, _ = procs["backward"].communicate(timeout=240)
        assert procs["backward"].returncode == 0, f"backward: {out[-3000:]}"
        time.sleep(1.5)
        yield col
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        col.kill()


# "early": windows only every 512 steps (the discarded warm-up one at 32, then 512, the last before
# the onset at 700): the collector's request after the alert (raised once the change has held over
# the critical window, 2 s here) brings one before 1,024. Its burning from step 700 runs after the
# jobs beside it ended (560 steps): side by side, the backward job's burning from its step 400
# slowed it from its step ~400 on 2 cores, so its onset could be dated before its last scheduled
# window (a CI run).
EARLY_FROM, EARLY_STEPS = 700, 1040


def early_job(tmp, col, name):
    return start_trainer(
        trainer_env(tmp, col.grpc, name, STEPWATCH_WINDOWS="scheduled", STEPWATCH_WINDOW_EVERY_STEPS=512,
                    STEPWATCH_OVERHEAD_BUDGET=0.5, **PHASES),
        "--steps", str(EARLY_STEPS), *SMALL, "--cause", "backward", "--cause-from-step", str(EARLY_FROM), "--cause-ms", "12")


def drift_alert(col, job):
    alerts = [a for a in col.api("/api/alerts")["alerts"]
              if a["job"] == job and a["alertname"] == "StepwatchThroughputDrift"]
    return alerts


@pytest.mark.parametrize("cause", list(CAUSES))
def test_the_diagnosis_names_the_injected_cause_first(jobs, cause):
    (alert,) = drift_alert(jobs, f"cause-{cause}")
    diagnosis = alert["diagnosis"]
    print(f"\n{cause}: {alert['summary']}\n  why: {diagnosis}")
    # (decided "" says the phase times could not be compared at the raise, "steps" that they were
    # and held nothing: see PHASES for the run that read no phases)
    assert diagnosis.startswith(CAUSES[cause] + " +"), (diagnosis, alert["decided"], alert["evidence"])
    assert "profiler window" not in diagnosis, diagnosis  # none was needed
    assert abs(alert["step"] - FROM) <= 60, alert
    if cause == "dataloader":
        assert diagnosis.startswith("data +") and "(data-loader wait +" in diagnosis, diagnosis


def _told(alerts):
    return "; ".join(f"{a['severity']} from step {a['step']}: {a['summary']} why: {a.get('diagnosis')}"
                     for a in alerts)


def test_a_healthy_job_raises_nothing(jobs, tmp_path):
    alerts = drift_alert(jobs, "healthy")
    if alerts:
        # The shared machine itself can still slow a job by 8% for 6 s (see DETECTION): such a
        # change is real, what the detector is for, and a host's are not repeatable: the same
        # job again must raise nothing.
        print(f"\nhealthy job raised {_told(alerts)}; running it again")
        job = start_trainer(trainer_env(tmp_path, jobs.grpc, "healthy-again", STEPWATCH_WINDOWS=0),
                            "--steps", str(STEPS), *SMALL)
        out, _ = job.communicate(timeout=240)
        assert job.returncode == 0, out[-3000:]
        time.sleep(1.5)
        again = drift_alert(jobs, "healthy-again")
        assert again == [], f"first run: {_told(alerts)}; again: {_told(again)}"


def test_a_slowdown_alert_brings_an_early_window_that_completes_the_diagnosis(jobs, tmp_path):
    name = "early"
    (alert,) = drift_alert(jobs, name)
    if alert["step"] < EARLY_FROM - 60:
        # A CI run: the shared 2-core machine slowed this job from about step 400 ("host CPU
        # +6.5 ms/step"), a real slowdown the detector raised at ~520, before the injected one;
        # only the warm-up window lay before that onset. Not repeatable: the job runs again.
        print(f"\nthe early job's alert came from before the injected change: {alert}; running it again")
        name = "early-again"
        job = early_job(tmp_path, jobs, name)
        out, _ = job.communicate(timeout=240)
        assert job.returncode == 0, out[-3000:]
        time.sleep(1.5)
        (alert,) = drift_alert(jobs, name)
    windows = jobs.api(f"/api/jobs/{name}/windows")["ranks"][0]["windows"]
    off_schedule = [w for w in windows if (w["first_step"] - 2) % 512]  # scheduled: 512k + 2
    assert off_schedule, [w["first_step"] for w in windows]
    # The request travels collector -> sidecar -> trainer (read at its 0.2 s pipe flushes) and the
    # raise step itself lags the trainer by a flush or two: a few seconds at most, well before
    # the next scheduled window at 1,024.
    assert alert["raised_step"] <= off_schedule[0]["first_step"] <= alert["raised_step"] + 60 < 1024, \
        (alert, off_schedule)
    assert alert["diagnosis"].startswith("backward +"), (
        {k: alert[k] for k in ("summary", "step", "raised_step", "diagnosis")},
        [(w["window_id"], w["first_step"]) for w in windows])
    assert "no profiler window after the onset" not in alert["diagnosis"]
