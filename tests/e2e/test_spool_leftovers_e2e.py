"""A run that ends while the collector is down leaves its batches in the spool; the next run
of the same job and rank on the node delivers them under the old session's Hello, says so
(spool_leftovers event), and removes the left-over spool once delivered."""

from __future__ import annotations

import time

import psutil

from _procs import Collector, free_port, run_trainer, trainer_env


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_next_run_delivers_what_a_run_left_in_the_spool(tmp_path):
    port = free_port()
    env = trainer_env(tmp_path, f"127.0.0.1:{port}", "leftover", STEPWATCH_WINDOWS=0, STEPWATCH_SHUTDOWN_TIMEOUT_S=1)
    run_trainer(env, "--steps", "40")  # the collector is down: everything stays spooled
    spool_root = tmp_path / "spool" / "leftover"
    left = [p for p in spool_root.iterdir() if list(p.glob("*.pb"))]
    assert len(left) == 1, list(spool_root.rglob("*"))
    owner = int((left[0] / "owner").read_text())
    deadline = time.monotonic() + 30
    while _running(owner):  # its sidecar may still be finishing (1 s shutdown timeout)
        assert time.monotonic() < deadline, "the first run's sidecar did not exit"
        time.sleep(0.1)
    col = Collector(tmp_path, grpc_port=port).start()
    try:
        run_trainer(env, "--steps", "25")
        col.wait_value("stepwatch_steps_total", 65, training_job="leftover")  # 40 from the first run + 25
        col.wait_value("stepwatch_agent_events_total", 1, training_job="leftover", kind="spool_leftovers")
        deadline = time.monotonic() + 15
        while spool_root.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        # both sessions delivered and closed: their folders, and then the job's, are gone
        assert not spool_root.exists(), list(spool_root.rglob("*"))
    finally:
        col.kill()
