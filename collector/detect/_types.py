"""Values exchanged between detectors, the engine and the alert book.

All times are Unix seconds of the data (the sample's own time, or the caller's ``now``), never
read from a clock here, so live ingest and replay behave the same.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

__all__ = ["Condition", "AllocatorPoint", "GpuPoint", "HostPoint", "WindowPoint", "INFO", "WARNING", "CRITICAL",
           "fmt_bytes", "median"]

INFO, WARNING, CRITICAL = "info", "warning", "critical"
SEVERITIES = (INFO, WARNING, CRITICAL)  # lowest first


@dataclasses.dataclass(frozen=True)
class Condition:
    """One rule that currently holds for (alertname, job, rank); rank is -1 for job-wide rules.

    ``since`` is the data time the condition started, ``step`` the step it refers to (the
    estimated change point for drift), ``for_s`` how long it must hold before it fires,
    ``ratio`` the sustained ratio to normal where the rule measures one (drift).
    """

    alertname: str
    job: str
    rank: int
    severity: str
    summary: str
    since: float
    step: Optional[int] = None
    for_s: float = 0.0
    ratio: Optional[float] = None

    @property
    def key(self) -> tuple:
        return (self.alertname, self.job, self.rank)


@dataclasses.dataclass(frozen=True)
class AllocatorPoint:
    time: float
    allocated_bytes: int
    reserved_bytes: int
    inactive_split_bytes: int
    alloc_retries: int
    ooms: int
    device_total_bytes: int


@dataclasses.dataclass(frozen=True)
class GpuPoint:
    time: float
    memory_used_bytes: Optional[int] = None
    memory_total_bytes: Optional[int] = None
    clock_event_reasons: Optional[int] = None
    sm_clock_hertz: Optional[float] = None
    temperature_celsius: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class HostPoint:
    time: float
    resident_memory_bytes: int


@dataclasses.dataclass(frozen=True)
class WindowPoint:
    """One profiler window of a rank, per profiled step: compute and communication seconds
    (device kernels on a GPU; host operators and collectives for CPU-only traces) and the
    analysed step time. ``first_step`` aligns the windows of a job's ranks."""
    time: float
    first_step: int
    steps: int
    compute_s: float
    communication_s: float
    step_time_s: float


def median(values) -> float:
    """Median of a non-empty sequence (mean of the middle two for an even count)."""
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def medians_without_each(values: list) -> list:
    """``[median(values without values[i]) for i]`` in O(n log n) (sorted once; dropping one
    element shifts the middle by at most one place). Needs at least two values."""
    n = len(values)
    order = sorted(range(n), key=values.__getitem__)
    v = [values[i] for i in order]
    m, out = n - 1, [0.0] * n
    for k, i in enumerate(order):  # k: the dropped element's place in sorted order
        hi = m // 2
        b = v[hi] if hi < k else v[hi + 1]
        if m % 2:
            out[i] = b
        else:
            a = v[hi - 1] if hi - 1 < k else v[hi]
            out[i] = 0.5 * (a + b)
    return out


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0
    return f"{n:.1f} TiB"


def finite_positive(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0
