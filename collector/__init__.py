"""stepwatch collector: gRPC ingest from agents, per-rank state, Prometheus export.

Importing this package is cheap; the service pieces load on first use.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# gRPC's fork handlers off (unless set otherwise) before anything here loads gRPC: /metrics
# renders in a forked child that never uses gRPC (_fork_render); with the handlers on, every
# scrape's fork stops gRPC's threads or logs that it skipped them. gRPC reads the variable when
# it loads: where something loaded it first without it, metrics_render auto keeps the thread.
GRPC_FORK_HANDLERS_OFF = ("grpc" not in sys.modules
                          or os.environ.get("GRPC_ENABLE_FORK_SUPPORT", "").strip().lower() in ("0", "false"))
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

__all__ = ["Collector", "CollectorSettings", "load_settings", "run"]


def __getattr__(name: str) -> Any:
    if name in ("Collector", "run"):
        from . import _app

        return getattr(_app, name)
    if name in ("CollectorSettings", "load_settings"):
        from . import _config

        return getattr(_config, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
