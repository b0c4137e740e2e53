"""What a slowdown episode asks of its rank (live only): a profiler window now, so its
diagnosis gets a window after the onset soon, and a full trace of a few steps, whose reference
the alert carries once it is asked and once it arrives."""

from __future__ import annotations

from typing import Callable, Optional

from ..detect import SEVERITIES, DetectionConfig
from ._book import Alert, AlertBook

__all__ = ["Asks"]

# A window asked of a rank serves every slowdown raised on it this soon after (a straggler and
# the same rank's drift are raised a second apart): one profiler session, not one per alert
_WINDOW_AGAIN_S = 30.0


class Asks:
    """``request_window(job, rank, reason)`` -> sent; ``request_trace(job, rank, steps)`` ->
    request id or None (both None in replay: nothing is asked). ``window_asked``: (job, rank)
    -> data time a window was last asked; ``traced_at``: job -> data time of its last alert
    trace; ``trace_alerts``: request id -> alert key; ``trace_episodes``: alert keys a trace
    was asked for."""

    def __init__(self, cfg: DetectionConfig, book: AlertBook,
                 request_window: Optional[Callable[[str, int, str], bool]],
                 request_trace: Optional[Callable[[str, int, int], Optional[str]]]):
        self.cfg, self.book = cfg, book
        self._request_window, self._request_trace = request_window, request_trace
        self.window_asked: dict[tuple, float] = {}
        self.traced_at: dict[str, float] = {}
        self.trace_alerts: dict[str, tuple] = {}
        self.trace_episodes: set = set()

    def slowdown(self, a: Alert, now: float) -> None:
        """A slowdown episode fired: ask the rank for a window now (unless one was asked of it in
        the last ``_WINDOW_AGAIN_S``: that window serves this episode's diagnosis too) and, at
        most once per job per ``trace_every_s``, for a full trace whose reference is attached to
        the alert."""
        asked = self.window_asked.get((a.job, a.rank))
        if self._request_window is not None and (asked is None or not 0 <= now - asked < _WINDOW_AGAIN_S):
            if self._request_window(a.job, a.rank, a.alertname):
                self.window_asked[(a.job, a.rank)] = now
        self.maybe_trace(a, now)

    def maybe_trace(self, a: Alert, now: float) -> None:
        """A full trace for an episode at or above ``trace_min_severity``, at most once per
        job per ``trace_every_s`` (and once per episode)."""
        if SEVERITIES.index(a.severity) < SEVERITIES.index(self.cfg.trace_min_severity):
            return
        last = self.traced_at.get(a.job)
        if self._request_trace is None or not self.cfg.trace_steps or \
                (last is not None and now - last < self.cfg.trace_every_s):
            return
        self.trace_episodes.add(a.key)
        if len(self.trace_episodes) > 10_000:
            self.trace_episodes.clear()
        request_id = self._request_trace(a.job, a.rank, int(self.cfg.trace_steps))
        if request_id:
            self.traced_at[a.job] = now
            self.trace_alerts[request_id] = a.key
            self.book.annotate(a.key, trace=f"requested {request_id}")
            if len(self.trace_alerts) > 1000:  # never answered: forget the oldest
                self.trace_alerts.pop(next(iter(self.trace_alerts)))
