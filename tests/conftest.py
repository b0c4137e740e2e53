import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")  # as the collector sets it, before gRPC loads
# torch on one intra-op thread, here and in the jobs the tests start (before torch loads): on the
# 2-core machine beside CPU burners torch's two threads made the demo job's steps wander 127-242 ms
# (one thread: 110-117 ms) and a profiler-trace test take 8.5 s instead of 6.1 s; the tests' small
# models gain nothing from a second thread
os.environ.setdefault("OMP_NUM_THREADS", "1")
# the agents of the jobs the tests start (those not given their own) spool and keep traces in a
# directory of this run, removed at its end: never in the user's own stepwatch directories
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

_RUN_DIR = tempfile.mkdtemp(prefix="stepwatch-tests-")
atexit.register(shutil.rmtree, _RUN_DIR, True)
os.environ.setdefault("STEPWATCH_SPOOL_DIR", os.path.join(_RUN_DIR, "spool"))
os.environ.setdefault("STEPWATCH_TRACE_DIR", os.path.join(_RUN_DIR, "traces"))

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _procs import collector_factory  # noqa: E402,F401  (fixture)


# `make test` runs the suite in two parts: the tests below, which compute on recorded or generated
# data and decide nothing from how fast this machine runs, on two pytest workers; then every other
# test (real jobs, collectors, sockets, timers, browsers: marked ``serial``) in one process, alone,
# as their timing was set. A plain ``pytest`` runs everything in one process. (The fuzz's collector
# runs in its process on a fake clock: what it decides follows no timer.)
_PARALLEL = ("collector/detect/", "collector/why/", "collector/alerting/", "collector/wire/",
             "collector/state/test_life_trend.py", "collector/tools/test_analyze.py",
             "collector/tools/test_replay.py", "collector/test_ring.py",
             "collector/test_collector_config.py", "core/", "proto/", "test_docs.py",
             "test_imports.py", "test_packaging.py", "agent/test_aftereffect_real.py",
             "agent/test_aftereffect_verdict.py", "agent/test_contract.py", "agent/test_settings.py",
             "agent/test_placement.py", "collector/ingest/test_fuzz.py")
# ... less these, which time or sleep (a rank's liveness, an HTTP client's deadlines, record bounds)
_SERIAL_AMONG = ("collector/detect/test_duplicate_rank.py",
                 "collector/alerting/test_alertmanager_client.py", "collector/wire/test_bounds.py")
_TESTS = pathlib.Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        rel = item.path.resolve().relative_to(_TESTS).as_posix()
        if not rel.startswith(_PARALLEL) or rel.startswith(_SERIAL_AMONG):
            item.add_marker(pytest.mark.serial)
