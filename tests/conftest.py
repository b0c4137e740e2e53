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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _procs import collector_factory  # noqa: E402,F401  (fixture)
