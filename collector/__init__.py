"""stepwatch collector: gRPC ingest from agents, per-rank state, Prometheus export.

Importing this package is cheap; the service pieces load on first use.
"""

from __future__ import annotations

import os
from typing import Any


def grpc_fork_handlers_off() -> bool:
    """Whether gRPC runs without its fork handlers (``GRPC_ENABLE_FORK_SUPPORT`` 0 or false):
    /metrics then may render in a forked child that never uses gRPC (export/_fork_render.py);
    with the handlers on, every scrape's fork stops gRPC's threads or logs that it skipped them.
    gRPC reads the variable when it loads: the ``stepwatch`` command sets it before anything
    loads gRPC; a program embedding a collector decides for itself (unset: the render thread)."""
    return os.environ.get("GRPC_ENABLE_FORK_SUPPORT", "").strip().lower() in ("0", "false")


__all__ = ["Collector", "CollectorSettings", "load_settings", "run"]


def __getattr__(name: str) -> Any:
    if name in ("Collector", "run"):
        from . import _app

        return getattr(_app, name)
    if name in ("CollectorSettings", "load_settings"):
        from . import _config

        return getattr(_config, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
