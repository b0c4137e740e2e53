"""Rules on time and NVML state: GPU clock throttling, stalled rank, agent gone.

``RankLiveness`` remembers a rank's last step (data time), when it arrived (the collector's
time) and recent step times; ``tick(now)`` judges stalls at the collector's Unix time ``now``
against the arrival, never the agent's clock. Agent-gone is judged by the engine, which knows the
connection state of every rank of a job. Not thread-safe.
"""

from __future__ import annotations

import collections
from typing import Optional

from ._config import GpuConfig, LivenessConfig
from ._names import AGENT_GONE, GPU_THROTTLED, JOB_STALLED
from ._types import CRITICAL, WARNING, Condition, GpuPoint, last_max_index, median

__all__ = ["RankLiveness", "throttle_condition", "REASON_NAMES"]

REASON_NAMES = ((0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
                (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
                (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"))


def throttle_condition(cfg: GpuConfig, job: str, rank: int, p: GpuPoint, old: Optional[Condition],
                       step: Optional[int]) -> Optional[Condition]:
    """The throttling Condition for NVML sample ``p`` (None when no masked reason bit is set)."""
    bits = (p.clock_event_reasons or 0) & cfg.throttle_mask
    if not bits:
        return None
    names = ", ".join(n for b, n in REASON_NAMES if bits & b)
    extra = [f"SM clock {p.sm_clock_hertz / 1e9:.2f} GHz" if p.sm_clock_hertz else "",
             f"{p.temperature_celsius:.0f} C" if p.temperature_celsius is not None else ""]
    detail = ", ".join(e for e in extra if e)
    summary = f"GPU clocks throttled: {names}" + (f" ({detail})" if detail else "")
    since = old.since if old is not None else p.time
    return Condition(GPU_THROTTLED, job, rank, WARNING, summary, since, step, cfg.for_s)


class RankLiveness:
    """Stall rule of one rank: no step for max(``stall_min_s``, ``stall_factor`` x median step)."""

    def __init__(self, cfg: LivenessConfig, job: str, rank: int):
        self.cfg, self.job, self.rank = cfg, job, rank
        self.last_step: Optional[int] = None
        self.last_time: Optional[float] = None
        # the collector's clock when the rank's latest steps arrived (live and replayed): the
        # stall rule's clock, so an agent whose host clock steps back or ahead raises no stall
        self.last_received: Optional[float] = None
        self._recent: collections.deque = collections.deque(maxlen=64)
        self.connected = True
        self.disconnected_at: Optional[float] = None

    def steps(self, step: list, end_time_s: list, duration_s: list) -> None:
        """A batch of steps, as columns: the latest (by time, the last of equal times) is the
        rank's last step; positive step times join the recent ones."""
        i = last_max_index(end_time_s)  # the last of the steps with the latest time (as step by step)
        if (self.last_time is None or end_time_s[i] >= self.last_time
                or end_time_s[i] < self.last_time - self.cfg.stall_min_s):  # (the agent's clock stepped back)
            self.last_step, self.last_time = step[i], end_time_s[i]
        total = sum(duration_s)  # NaN when one is (min() does not see it)
        self._recent.extend(duration_s if min(duration_s) > 0 and total == total else
                            [t for t in duration_s if t > 0])

    def stalled(self, now: float) -> Optional[Condition]:
        if not self.cfg.enabled or self.last_time is None or not self.connected:
            return None
        last = self.last_received if self.last_received is not None else self.last_time
        idle = now - last
        if idle <= self.cfg.stall_min_s:  # the usual case: the limit is at least this (no median)
            return None
        usual = median(self._recent) if self._recent else 0.0
        limit = max(self.cfg.stall_min_s, self.cfg.stall_factor * usual)
        if idle <= limit:
            return None
        summary = (f"no training step for {idle:.0f} s (usual step {usual * 1e3:.1f} ms, limit {limit:.0f} s) "
                   f"after step {self.last_step:,}")
        return Condition(JOB_STALLED, self.job, self.rank, CRITICAL, summary,
                         last + limit, self.last_step, 0.0)

    def gone(self, now: float, others_connected: int) -> Optional[Condition]:
        if (not self.cfg.enabled or self.connected or self.disconnected_at is None or others_connected == 0
                or now - self.disconnected_at < self.cfg.agent_gone_s):
            return None
        summary = (f"agent of rank {self.rank} disconnected {now - self.disconnected_at:.0f} s ago while "
                   f"{others_connected} other rank(s) of the job are still connected"
                   + (f"; last step {self.last_step:,}" if self.last_step is not None else ""))
        return Condition(AGENT_GONE, self.job, self.rank, CRITICAL, summary,
                         self.disconnected_at, self.last_step, 0.0)
