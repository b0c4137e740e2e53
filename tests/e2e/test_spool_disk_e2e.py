"""The spool's disk refuses (a full or a read-only filesystem, made by the test as a small
tmpfs; root): the sidecar keeps batches in memory, says so once (log line and a
spool_write_failed event), and every step still reaches the collector."""

from __future__ import annotations

import os
import subprocess

import pytest

from _procs import run_trainer, trainer_env


@pytest.fixture
def small_fs(tmp_path):
    mounts = []

    def mount(name, options):
        target = tmp_path / name
        target.mkdir()
        run = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True)
        if run.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {run.stderr.decode().strip()}")
        mounts.append(target)
        return target

    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    yield mount
    for target in mounts:
        subprocess.run(["umount", str(target)], capture_output=True)


@pytest.mark.parametrize("kind", ["full", "read_only"])
def test_spool_falls_back_to_memory_and_nothing_is_lost(collector_factory, tmp_path, small_fs, kind):
    if kind == "full":
        spool = small_fs("full", "size=64k")
        fd = os.open(spool / "filler", os.O_WRONLY | os.O_CREAT)
        try:  # fill it to the last byte
            while os.write(fd, b"\0" * 512):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
    else:
        spool = small_fs("ro", "ro,size=64k")
    col = collector_factory()
    env = trainer_env(tmp_path, col.grpc, f"spool{kind}", STEPWATCH_SPOOL_DIR=spool, STEPWATCH_WINDOWS=0)
    run = run_trainer(env, "--steps", "60")
    col.wait_value("stepwatch_steps_total", 60, training_job=f"spool{kind}")
    col.wait_value("stepwatch_agent_events_total", 1, training_job=f"spool{kind}", kind="spool_write_failed")
    assert run.stderr.count("cannot spool to disk") == 1, run.stderr[-2000:]
    assert col.value("stepwatch_agent_records_dropped_total", training_job=f"spool{kind}") == 0
