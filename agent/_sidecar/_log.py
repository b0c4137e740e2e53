"""Logging for the sidecar: stderr with a rank prefix, and duplicate suppression."""

from __future__ import annotations

import logging
import sys

from stepwatch.core.support import OnceLog as _OnceLog

__all__ = ["LOG", "OnceLog", "setup_logging"]

LOG = logging.getLogger("stepwatch.agent.sidecar")


def setup_logging(rank: int, level: int) -> None:
    """Send the sidecar's log lines to stderr as ``stepwatch-sidecar[rank N]: message``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"stepwatch-sidecar[rank {rank}]: %(levelname)s %(message)s"))
    LOG.handlers[:] = [handler]
    LOG.setLevel(level)
    LOG.propagate = False


def OnceLog(logger: logging.Logger = LOG, max_keys: int = 1000) -> _OnceLog:
    """The shared bounded log-once helper, logging to the sidecar's logger by default."""
    return _OnceLog(logger, max_keys)
