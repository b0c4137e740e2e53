"""Bad input end to end: each is a clear error or a counted drop, and training still finishes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from _procs import free_port, run_script, run_trainer, trainer_env


def test_unreachable_collector_training_finishes_and_spools(tmp_path):
    env = trainer_env(tmp_path, f"127.0.0.1:{free_port()}", "nocollector",
                      STEPWATCH_SHUTDOWN_TIMEOUT_S="0.5")
    started = time.monotonic()
    run = run_trainer(env, "--steps", "25", timeout=120)
    assert "25 steps" in run.stdout
    assert time.monotonic() - started < 60
    # The unsent batches wait on disk for a later resend instead of being lost.
    deadline = time.monotonic() + 20
    while not list((tmp_path / "spool").rglob("*.pb")):
        assert time.monotonic() < deadline, "no spooled batch left on disk"
        time.sleep(0.2)


@pytest.mark.parametrize("name, value, option", [("STEPWATCH_FLUSH_INTERVAL_S", "soon", "flush_interval_s"),
                                                  ("STEPWATCH_DISABLE", "2", "disable")])
def test_a_bad_environment_value_is_one_error_line_and_training_runs_on(tmp_path, name, value, option):
    env = trainer_env(tmp_path, "127.0.0.1:1", "badenv", **{name: value})
    run = run_trainer(env, "--steps", "3", timeout=120)  # exit 0: the job is not killed
    errors = [line for line in run.stderr.splitlines() if "stepwatch" in line]
    assert len(errors) == 1, run.stderr[-2000:]
    assert f"option '{option}' from environment {name}: invalid value '{value}'" in errors[0]
    assert "training goes on without it" in errors[0] and "3 steps" in run.stdout
    assert not (tmp_path / "spool").exists()  # no agent


def test_a_bad_explicit_argument_still_raises(tmp_path):
    script = tmp_path / "bad_arg.py"
    script.write_text("from stepwatch import agent\nagent.attach(flush_interval_s='soon')\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env=trainer_env(tmp_path, "127.0.0.1:1", "badarg"))
    assert run.returncode != 0 and "SettingsError" in run.stderr
    assert "option 'flush_interval_s' from argument: invalid value 'soon'" in run.stderr


def test_disabled_agent_does_nothing(tmp_path):
    env = trainer_env(tmp_path, "127.0.0.1:1", "off", STEPWATCH_DISABLE="1")
    run_trainer(env, "--steps", "3", timeout=120)
    assert not (tmp_path / "spool").exists()


def test_wrong_token_is_rejected_and_training_finishes(collector_factory, tmp_path):
    col = collector_factory("--auth-token", "s3cret")
    env = trainer_env(tmp_path, col.grpc, "badtoken", STEPWATCH_TOKEN="wrong",
                      STEPWATCH_SHUTDOWN_TIMEOUT_S="0.5")
    run_trainer(env, "--steps", "10", timeout=120)
    deadline = time.monotonic() + 20
    while not col.value("stepwatch_collector_streams_rejected_total", reason="unauthenticated"):
        assert time.monotonic() < deadline, "rejection not counted"
        time.sleep(0.2)
    assert col.value("stepwatch_steps_total", training_job="badtoken") is None
    good = trainer_env(tmp_path, col.grpc, "goodtoken", STEPWATCH_TOKEN="s3cret")
    run_trainer(good, "--steps", "10", timeout=120)
    col.wait_value("stepwatch_steps_total", 10, training_job="goodtoken")


def test_fork_child_of_attached_process_stays_silent(collector_factory, tmp_path):
    col = collector_factory()
    script = tmp_path / "forker.py"
    script.write_text(
        "import os, torch\n"
        "from stepwatch import agent\n"
        "agent.attach(job='forker')\n"
        "for _ in range(3): agent.step()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    for _ in range(50): agent.step()  # child: must report nothing\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "for _ in range(2): agent.step()\n")
    env = trainer_env(tmp_path, col.grpc, "forker")
    run_script(script, env)
    col.wait_value("stepwatch_steps_total", 5, training_job="forker")
    time.sleep(1.0)
    assert col.value("stepwatch_steps_total", training_job="forker") == 5
    assert col.value("stepwatch_collector_streams_total") == 1


def test_hook_that_never_fires_is_reported_with_a_hint(collector_factory, tmp_path):
    """A loop that updates weights without optimizer.step(): the step hook never fires while
    batches are drawn. The agent says so once on stderr (naming agent.step()) and sends the
    hook_silent event, which the collector counts."""
    col = collector_factory()
    env = trainer_env(tmp_path, col.grpc, "nohook", STEPWATCH_WINDOWS="0")
    run = run_trainer(env, "--steps", "80", "--manual-update", timeout=120)
    assert "80 steps" in run.stdout
    hints = [line for line in run.stderr.splitlines() if "call stepwatch.agent.step()" in line]
    assert len(hints) == 1, run.stderr[-2000:]
    assert "64 DataLoader batches without a step boundary" in hints[0]
    col.wait_value("stepwatch_agent_events_total", 1, training_job="nohook", kind="hook_silent")
    assert col.value("stepwatch_steps_total", training_job="nohook") in (None, 0)


def test_hooked_loop_raises_no_silent_hook_event(collector_factory, tmp_path):
    col = collector_factory()
    env = trainer_env(tmp_path, col.grpc, "hooked", STEPWATCH_WINDOWS="0")
    run = run_trainer(env, "--steps", "80", timeout=120)
    assert "call stepwatch.agent.step()" not in run.stderr
    col.wait_value("stepwatch_steps_total", 80, training_job="hooked")
    assert col.value("stepwatch_agent_events_total", training_job="hooked", kind="hook_silent") is None
