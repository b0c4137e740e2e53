"""When the sidecar seals a batch: its own flush interval, lengthened by the collector's pacing
ask. Shared by the flusher and by bench/collector_scale.py, whose generator sends as sidecars do."""

from __future__ import annotations

import math

from stepwatch.proto import MAX_PACE_S  # the longest batch interval a collector can ask for

__all__ = ["MAX_PACE_S", "paced_interval", "seal_due"]


def paced_interval(own_s: float, ask_s: float) -> float:
    """The longer of the own interval and the collector's ask (0: none), the ask capped at
    MAX_PACE_S: a broken collector cannot make a rank's data hours late."""
    return min(max(MAX_PACE_S, own_s), max(own_s, ask_s if math.isfinite(ask_s) else 0.0))


def seal_due(now: float, last_seal: float, every_s: float, own_s: float) -> bool:
    """Whether a tick (one every ``own_s``) seals: ``every_s`` has passed since the last seal,
    less a quarter tick (ticks do not fall exactly on the interval)."""
    return now - last_seal >= every_s - 0.25 * own_s
