import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")  # as the collector sets it, before gRPC loads

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _procs import collector_factory  # noqa: E402,F401  (fixture)
