"""Values exchanged between detectors, the engine and the alert book.

All times are Unix seconds of the data (the sample's own time, or the caller's ``now``), never
read from a clock here, so live ingest and replay behave the same.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import math
from typing import Any, NamedTuple, Optional, Protocol

__all__ = ["Condition", "Backing", "DriftView", "AllocatorPoint", "GpuPoint", "HostPoint", "WindowPoint", "INFO", "WARNING", "CRITICAL",
           "fmt_bytes", "last_max_index", "median"]

INFO, WARNING, CRITICAL = "info", "warning", "critical"
SEVERITIES = (INFO, WARNING, CRITICAL)  # lowest first


@dataclasses.dataclass(frozen=True)
class DriftView:
    """What one rank's drift detector shows outside detection (``/api/jobs``, the page):
    ``armed`` (its settled level is there and it judges), ``reach`` (once armed, the smallest
    sustained shift each severity raises, ``{severity: ratio}``), ``level_s`` (the settled
    seconds per step it judges against), ``settling_again_since`` (the onset of a shift that
    began inside its settling time, while it settles again) and ``arming`` ((data time it arms
    at, its last step's end time), before it is armed)."""

    armed: Optional[bool] = None
    reach: Optional[dict] = None
    level_s: Optional[float] = None
    settling_again_since: Optional[float] = None
    arming: Optional[tuple] = None


class Kind:
    """What held a step-time shift (``Backing.kind``): one phase's time, the device's work over
    the phases, the GPU's busy time, the data-loader's wait, the allocator's calls."""

    PHASE, DEVICE, GPU, LOADER, ALLOCATOR = "phase", "device", "gpu", "loader", "allocator"
    BEYOND = "beyond host"  # a phase's device time beyond its host time (RankEvidence.spreads, .beyond_since)


@dataclasses.dataclass(frozen=True)
class Backing:
    """The evidence a step-time shift came with: ``kind`` (a :class:`Kind`),
    ``name`` (the phase, "data-loader wait", "allocator calls"), ``before``/``after`` in its unit
    (``unit``: "ms" per step, or "calls/step"), ``share``: its growth over the step's (ms), and
    ``spreads``: its growth in spreads of its own source's medians over the same span (how
    clearly the source itself changed; None where not measured), and ``host_paced``: a phase
    whose host time grew with its device time (the host's pace sets it: more Python work, or a
    host that slowed, which the times cannot tell apart)."""

    kind: str
    name: str
    before: float
    after: float
    unit: str
    share: float
    spreads: Optional[float] = None
    host_paced: bool = False

    def text(self) -> str:
        d = self.after - self.before
        if self.kind == Kind.BEYOND:
            return f"{self.name}'s device time beyond its host time {d:+.1f} ms/step ({self.before:.1f} -> {self.after:.1f} ms)"
        if self.unit == "ms":
            return f"{self.name} {d:+.1f} ms/step ({self.before:.1f} -> {self.after:.1f} ms)"
        return f"{self.name} {self.before:.1f} -> {self.after:.1f} per step"


@dataclasses.dataclass(frozen=True)
class Condition:
    """One rule that currently holds for (alertname, job, rank); rank is -1 for job-wide rules.

    ``since`` is the data time the condition started, ``step`` the step it refers to (the
    estimated change point for drift), ``for_s`` how long it must hold before it fires,
    ``ratio`` the sustained ratio to normal where the rule measures one (drift). ``change``
    counts the further changes inside one episode (drift: 0 at the raise, +1 each time the
    level moved again by another change, with ``since``/``step`` the newest onset).
    ``evidence``: what the shift came with at that onset (drift), and ``decided`` how it was
    told a change: "job" (by that evidence), "steps" (by the step times alone: the evidence
    compared and none held it), "" (not known or not asked). ``text``: the typed parts the
    summary was made of, where it is shown again with one of them changed (drift's onset, its
    evidence), so no text is patched. ``found``: what a rule found, by
    name, where other rules reason on it (stragglers: "own_work", its work before the
    collectives longer than the others'; "gpu_busier", its GPU busier; "steps", its step time or
    loader wait; "windows", its compute in profiler windows): read by the why, never its prose.
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
    change: int = 0
    evidence: Optional[Backing] = None
    decided: str = ""
    found: tuple = ()
    # the typed parts ``summary`` was rendered from, where a rule shows it anew with one part
    # changed (drift: _drift_episode.DriftText); the summary is the figure compared
    text: Any = dataclasses.field(default=None, compare=False)

    @property
    def key(self) -> tuple:
        return (self.alertname, self.job, self.rank)


# The sample points are named tuples: the collector makes one per sample of every batch (at the
# agents' 1 Hz, tens of thousands a second at 10,000 ranks), and a frozen dataclass's __init__
# costs several times a tuple's construction.
class AllocatorPoint(NamedTuple):
    time: float
    allocated_bytes: int
    reserved_bytes: int
    inactive_split_bytes: int
    alloc_retries: int
    ooms: int
    device_total_bytes: int


class GpuPoint(NamedTuple):
    time: float
    memory_used_bytes: Optional[int] = None
    memory_total_bytes: Optional[int] = None
    clock_event_reasons: Optional[int] = None
    sm_clock_hertz: Optional[float] = None
    temperature_celsius: Optional[float] = None


class HostPoint(NamedTuple):
    time: float
    resident_memory_bytes: int


class SampleTable(Protocol):
    """A batch's samples of one kind as columns, by the wire's field names (the collector's
    ``_columns.Samples``): a column is read only when asked for."""

    def __len__(self) -> int: ...

    def __getitem__(self, name: str) -> list:
        """The field's values in batch order (unset reads 0)."""

    def optional(self, name: str) -> list:
        """The field's values, None where a sample does not carry it."""

    def last(self, name: str, optional: bool = False) -> Any:
        """The last sample's value (``optional``: None when it does not carry it)."""


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


def last_max_index(values: list) -> int:
    """The index of the greatest of ``values`` (non-empty), the last of equal ones: the latest
    record by time, as records kept one by one (a later equal time replaces) would leave it."""
    top = max(values)
    if values[-1] == top:  # (the usual: samples in time order)
        return len(values) - 1
    return len(values) - 1 - values[::-1].index(top)


def median(values) -> float:
    """Median of a non-empty sequence (mean of the middle two for an even count)."""
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


class SortedWindow:
    """The newest ``maxlen`` values, kept sorted as well: ``median()`` in O(1) and
    ``mad(center)`` (median absolute deviation) in O(log n), equal to ``median`` over the same
    values. Appending is a bisection and a list insert/delete (memmove in C), not a sort of the
    window per new value (O(n log n) in Python per block)."""

    __slots__ = ("maxlen", "_order", "_sorted")

    def __init__(self, maxlen: int):
        self.maxlen = maxlen
        self._order: collections.deque = collections.deque()
        self._sorted: list = []

    def __len__(self) -> int:
        return len(self._sorted)

    def append(self, value: float) -> None:
        if len(self._order) == self.maxlen:
            old = self._order.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]
        self._order.append(value)
        bisect.insort(self._sorted, value)

    def median(self) -> float:
        s, n = self._sorted, len(self._sorted)
        return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])

    def mad(self, center: float) -> float:
        """``median(abs(v - center) for v in values)``, in O(log n)."""
        return mad_sorted(self._sorted, center)


def mad_sorted(s: list, center: float) -> float:
    """``median(abs(v - center) for v in s)`` of a sorted list ``s``, in O(log n): the
    deviations below ``center`` and those at or above it are two ascending runs, and the k-th
    smallest of two sorted runs is a bisection."""
    n = len(s)
    p = bisect.bisect_left(s, center)  # how many values lie below center

    def kth(k: int) -> float:
        # below[i] = center - s[p-1-i], above[j] = s[p+j] - center, both ascending; take the
        # fewest from below such that the k+1 smallest are below[:i] + above[:k+1-i]
        lo, hi = max(0, k + 1 - (n - p)), min(k + 1, p)
        while lo < hi:
            i = (lo + hi) // 2
            if center - s[p - 1 - i] >= s[p + k - i] - center:
                hi = i
            else:
                lo = i + 1
        best = center - s[p - lo] if lo > 0 else -math.inf
        return max(best, s[p + k - lo] - center) if k + 1 - lo > 0 else best

    return kth(n // 2) if n % 2 else 0.5 * (kth(n // 2 - 1) + kth(n // 2))


def _median_without(v: list, k: int) -> float:
    """The median of the sorted list ``v`` without its element at ``k`` (the middle shifts by
    at most one place)."""
    m = len(v) - 1
    hi = m // 2
    b = v[hi] if hi < k else v[hi + 1]
    if m % 2:
        return b
    return 0.5 * ((v[hi - 1] if hi - 1 < k else v[hi]) + b)


def medians_without_each(values: list) -> list:
    """``[median(values without values[i]) for i]`` in O(n log n) (sorted once). Needs at
    least two values."""
    order = sorted(range(len(values)), key=values.__getitem__)
    v = [values[i] for i in order]
    out = [0.0] * len(values)
    for k, i in enumerate(order):  # k: the dropped element's place in sorted order
        out[i] = _median_without(v, k)
    return out


def mads_without_each(values: list, centers: list) -> list:
    """``[median(abs(v - centers[i]) for v in values without values[i]) for i]``: each value's
    leave-one-out MAD around its own center (the others' median, :func:`medians_without_each`,
    which takes two or three distinct values). The deviations around each distinct center are
    sorted once. O(n log n) for the lot. Needs at least two values."""
    out, by_center = [0.0] * len(values), {}
    for i, c in enumerate(centers):
        d = by_center.get(c)
        if d is None:
            d = by_center[c] = sorted([abs(v - c) for v in values])
        # the dropped deviation's place (an equal one's: the same values remain)
        out[i] = _median_without(d, bisect.bisect_left(d, abs(values[i] - c)))
    return out


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0
    return f"{n:.1f} TiB"


def finite_positive(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0
