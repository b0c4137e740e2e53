"""A sidecar killed mid-run (SIGKILL) is restarted by the trainer: training goes on, the new
sidecar takes over the session and its spool, the restart is an event, the steps produced
while no sidecar read them are counted as dropped, and the rest arrive."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import time

import psutil
import pytest

from _procs import Collector, start_trainer, trainer_env

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


def test_killed_sidecar_is_restarted_and_the_gap_is_reported(capped, collector_factory, tmp_path):
    # (``capped``: the restart-cap test's kills run meanwhile, in the background)
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


def _kill_to_the_cap(col, tmp_path) -> list:
    """Five kills, five restarts (1 + 2 + 4 + 8 + 16 s apart): the rank's StepwatchAgentRestartCap
    alerts once the fifth restart (the cap) has come, or after 30 s."""
    env = trainer_env(tmp_path, col.grpc, "capped", STEPWATCH_WINDOWS=0)
    trainer = start_trainer(env, "--steps", "6000", "--step-sleep-s", "0.02")
    try:
        col.wait_value("stepwatch_agent_connected", 1, training_job="capped")
        sidecar = _sidecar_of(trainer.pid)
        for _ in range(5):
            os.kill(sidecar.pid, signal.SIGKILL)
            deadline = time.monotonic() + 45
            new = sidecar
            while new.pid == sidecar.pid:
                assert time.monotonic() < deadline and trainer.poll() is None, "the sidecar was not restarted"
                time.sleep(0.2)
                new = _sidecar_of(trainer.pid)
            sidecar = new
        deadline = time.monotonic() + 30
        while True:
            alerts = [a for a in col.api("/api/alerts")["alerts"] if a["alertname"] == "StepwatchAgentRestartCap"]
            if alerts or time.monotonic() > deadline:
                return alerts
            time.sleep(0.3)
    finally:
        trainer.kill()
        trainer.wait()


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    """:func:`_kill_to_the_cap` with its own collector, started with the module: its ~31 s of
    restart back-off run while the other test of this file runs (both mostly wait: their trainers
    sleep 20 ms a step)."""
    tmp = tmp_path_factory.mktemp("capped")
    col = Collector(tmp, []).start()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        yield pool.submit(_kill_to_the_cap, col, tmp)
    finally:
        pool.shutdown(wait=True)
        col.kill()


def test_a_sidecar_at_its_restart_cap_raises_an_alert_that_says_so(capped):
    """Five kills, five restarts: the fifth restart is the cap, the collector raises
    StepwatchAgentRestartCap for the rank with the reason, before the rank goes quiet for good."""
    alerts = capped.result(timeout=400)
    assert len(alerts) == 1, alerts
    (a,) = alerts
    assert a["job"] == "capped" and a["rank"] == 0 and a["state"] == "firing" and a["severity"] == "warning", a
    assert "restarted 5 of 5 times" in a["summary"] and "stops reporting" in a["summary"], a["summary"]
