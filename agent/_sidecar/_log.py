"""Logging for the sidecar: stderr with a rank prefix, and duplicate suppression."""

from __future__ import annotations

import logging
import sys
import threading

__all__ = ["LOG", "OnceLog", "setup_logging"]

LOG = logging.getLogger("stepwatch.agent.sidecar")


def setup_logging(rank: int, level: int) -> None:
    """Send the sidecar's log lines to stderr as ``stepwatch-sidecar[rank N]: message``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"stepwatch-sidecar[rank {rank}]: %(levelname)s %(message)s"))
    LOG.handlers[:] = [handler]
    LOG.setLevel(level)
    LOG.propagate = False


class OnceLog:
    """Logs a message the first time its key is seen; later ones with the same key are dropped.

    Thread-safe. At most ``max_keys`` keys are remembered; beyond that, everything is logged
    once more per key rather than memory growing without bound.
    """

    def __init__(self, logger: logging.Logger = LOG, max_keys: int = 1000) -> None:
        self._logger = logger
        self._seen: set = set()
        self._max_keys = max_keys
        self._lock = threading.Lock()

    def log(self, level: int, key: object, msg: str, *args: object) -> bool:
        """Log unless ``key`` was logged before; return True when it was logged."""
        with self._lock:
            if key in self._seen:
                return False
            if len(self._seen) >= self._max_keys:
                self._seen.clear()
            self._seen.add(key)
        self._logger.log(level, msg, *args)
        return True

    def clear(self) -> None:
        """Let every key be logged again (e.g. a new outage after a healthy period)."""
        with self._lock:
            self._seen.clear()

    def forget(self, key: object) -> None:
        """Let ``key`` be logged again (e.g. after the condition cleared)."""
        with self._lock:
            self._seen.discard(key)
