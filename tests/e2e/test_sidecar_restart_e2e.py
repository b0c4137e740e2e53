"""A sidecar killed mid-run (SIGKILL) is restarted by the trainer: training goes on, the new
sidecar takes over the session and its spool, the restart is an event, the steps produced
while no sidecar read them are counted as dropped, and the rest arrive."""

from __future__ import annotations

import os
import signal
import time

import psutil

from _procs import start_trainer, trainer_env

STEPS = 400


def _sidecar_of(trainer_pid, deadline_s=60):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for child in psutil.Process(trainer_pid).children(recursive=True):
            try:
                if "stepwatch.agent._sidecar" in " ".join(child.cmdline()):
                    return child
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.1)
    raise AssertionError("no sidecar process")


def test_killed_sidecar_is_restarted_and_the_gap_is_reported(collector_factory, tmp_path):
    col = collector_factory()
    env = trainer_env(tmp_path, col.grpc, "restart", STEPWATCH_WINDOWS=0)
    trainer = start_trainer(env, "--steps", str(STEPS), "--step-sleep-s", "0.02")
    try:
        first = _sidecar_of(trainer.pid)
        col.wait_value("stepwatch_agent_connected", 1, training_job="restart")
        time.sleep(1.0)
        os.kill(first.pid, signal.SIGKILL)
        second = None
        deadline = time.monotonic() + 30
        while second is None or second.pid == first.pid:
            assert time.monotonic() < deadline, "the sidecar was not restarted"
            second = _sidecar_of(trainer.pid)
            time.sleep(0.1)
        out, _ = trainer.communicate(timeout=120)
        assert trainer.returncode == 0, out[-3000:]
    finally:
        if trainer.poll() is None:
            trainer.kill()
    assert "restarted it (1 of 5)" in out, out[-2000:]
    col.wait_value("stepwatch_agent_events_total", 1, training_job="restart", kind="sidecar_restarted")
    deadline = time.monotonic() + 30
    while True:
        steps = col.value("stepwatch_steps_total", training_job="restart") or 0
        dropped = col.value("stepwatch_agent_records_dropped_total", training_job="restart") or 0
        if steps == STEPS and dropped > 0 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    # the trainer kept going to the end; about a second of records (the restart waits 1 s) never
    # reached a sidecar and is counted
    assert steps == STEPS and dropped > 0, (steps, dropped)
