"""A collector embedded in a program changes nothing of that program's process: no garbage
collector hooks or freezing, no thread switch interval, no environment variable; only the
collector's own process (`stepwatch collector`, process_wide) does. `stepwatch run` hands the
user's command its environment without the variable the command line set for itself."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time


def test_an_embedded_collector_leaves_the_process_as_it_was(start_collector):
    switch, callbacks, env = sys.getswitchinterval(), list(gc.callbacks), dict(os.environ)
    frozen = gc.get_freeze_count()
    running = start_collector(gil_switch_interval_s=0.0002, gc_full_every_s=60)
    assert running.get("/healthz")[0] == 200
    time.sleep(1.5)  # past the garbage collector's one-second tick, had it been started
    assert sys.getswitchinterval() == switch
    assert gc.callbacks == callbacks
    assert gc.get_freeze_count() == frozen
    assert dict(os.environ) == env
    running.loop.call(running.collector.stop(grace_s=0))
    assert sys.getswitchinterval() == switch and gc.callbacks == callbacks


def test_a_collector_in_its_own_process_takes_the_process_and_gives_it_back(start_collector):
    switch, callbacks = sys.getswitchinterval(), list(gc.callbacks)
    running = start_collector(process_wide=True, gil_switch_interval_s=0.0002)
    assert abs(sys.getswitchinterval() - 0.0002) < 1e-6
    assert len(gc.callbacks) >= len(callbacks)  # the collection counter (installed once per process)
    running.loop.call(running.collector.stop(grace_s=0))
    assert sys.getswitchinterval() == switch


def test_stepwatch_run_gives_the_command_its_own_grpc_environment():
    """The command line set GRPC_ENABLE_FORK_SUPPORT for its collector; the user's command gets
    it only when the user had set it."""
    code = ("import os, argparse; from stepwatch.collector.tools import run; "
            "env = run.environment(argparse.Namespace(collector=None, job=None, token=None), dict(os.environ)); "
            "print(env.get('GRPC_ENABLE_FORK_SUPPORT', '-'), os.environ.get('GRPC_ENABLE_FORK_SUPPORT', '-'))")
    base = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    out = subprocess.run([sys.executable, "-c", code], env=base, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["-", "0"], out.stdout + out.stderr
    out = subprocess.run([sys.executable, "-c", code], env=dict(base, GRPC_ENABLE_FORK_SUPPORT="1"),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["1", "1"], out.stdout + out.stderr
