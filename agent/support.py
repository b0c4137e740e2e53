"""Small helpers shared by every long-lived part of stepwatch (sidecar threads, collector
tasks): jittered exponential backoff and bounded log-once. Pure apart from logging."""

from __future__ import annotations

import logging
import random
import threading
from typing import Hashable, Optional

__all__ = ["backoff_delay", "OnceLog"]


def backoff_delay(attempt: int, base: float = 0.5, cap: float = 30.0,
                  rng: Optional[random.Random] = None) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**attempt)] seconds.
    ``attempt`` counts consecutive failures from 0."""
    ceiling = min(cap, base * (2 ** min(attempt, 62)))
    return (rng or random).uniform(0.0, ceiling)


class OnceLog:
    """Logs a message the first time its key is seen; later ones with the same key are dropped.

    Thread-safe. At most ``max_keys`` keys are remembered; beyond that the memory is cleared
    and everything is logged once more, rather than memory growing without bound.
    """

    def __init__(self, logger: logging.Logger, max_keys: int = 1000) -> None:
        self._logger = logger
        self._seen: set = set()
        self._max_keys = max_keys
        self._lock = threading.Lock()

    def log(self, level: int, key: Hashable, msg: str, *args: object,
            exc_info: bool = False) -> bool:
        """Log unless ``key`` was logged before; return True when it was logged."""
        with self._lock:
            if key in self._seen:
                return False
            if len(self._seen) >= self._max_keys:
                self._seen.clear()
            self._seen.add(key)
        self._logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def clear(self) -> None:
        """Let every key be logged again (e.g. a new outage after a healthy period)."""
        with self._lock:
            self._seen.clear()

    def forget(self, key: Hashable) -> None:
        """Let ``key`` be logged again (e.g. after the condition cleared)."""
        with self._lock:
            self._seen.discard(key)
