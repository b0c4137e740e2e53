"""The why's signals beside the phases: host CPU and counters per step, the GPU's clocks and
activity across an onset, allocator churn and retries, each read from the evidence's rings and
said in a few words (or "" when it says nothing)."""

from __future__ import annotations

import statistics
from typing import Optional

# device activity (SM or tensor, GPM) up by this much across the onset: the device got busier
_BUSIER = 0.05
# allocator churn is named when its cudaMalloc + cudaFree calls per step rose by this many, to
# this many times the rate before
_CHURN_MORE, _CHURN_TIMES = 1.0, 3.0


def _median(values) -> Optional[float]:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _cpu_per_step(host, blocks, lo: float, hi: float) -> Optional[float]:
    """Trainer CPU seconds per step between data times lo and hi."""
    return _counter_per_step([(t, c) for t, c in host if lo <= t <= hi], blocks, lo, hi)


def _counter_per_step(pts: list, blocks, lo: float, hi: float) -> Optional[float]:
    """The growth per step of a cumulative counter sampled as ``pts`` ((time, value), data
    times within lo..hi), the steps counted from the blocks ending in the same span."""
    bl = [b for b in blocks if lo <= b[2] <= hi]
    if len(pts) < 2 or len(bl) < 2:
        return None
    steps = bl[-1][1] - bl[0][1]
    growth = (pts[-1][1] - pts[0][1]) * ((bl[-1][2] - bl[0][2]) / max(1e-9, pts[-1][0] - pts[0][0]))
    return growth / steps if steps > 0 else None


def _clocks(gpu, since: float) -> str:
    before = [g for g in gpu if g[0] < since]
    after = [g for g in gpu if g[0] >= since]
    if not before or not after:
        return ""
    sm_b, sm_a = _median(g[1] for g in before), _median(g[1] for g in after)
    reasons = {g[3] for g in after if g[3]} - {g[3] for g in before if g[3]}
    if sm_b and sm_a and abs(sm_a - sm_b) / sm_b >= 0.03:
        return f"SM clock {sm_b / 1e9:.2f} -> {sm_a / 1e9:.2f} GHz"
    return "clocks unchanged" if not reasons else f"new clock-event reasons {sorted(reasons)}"


def _activity(gpu, since: float) -> str:
    """GPM activity that moved by >= 5 points across the onset ("tensor activity 78% -> 61%")."""
    moved = _gpm_moves([g for g in gpu if g[0] < since], [g for g in gpu if g[0] >= since])
    return "; ".join(f"{label} {b:.0%} -> {a:.0%}" for label, b, a in moved if abs(a - b) >= 0.05)


def _gpm_moves(before: list, after: list) -> list[tuple[str, float, float]]:
    """(label, median before, median after) of the GPM activities (SM, tensor, DRAM) sampled on
    both sides."""
    out = []
    for i, label in ((4, "SM activity"), (5, "tensor activity"), (6, "DRAM bandwidth")):
        b, a = _median(g[i] for g in before), _median(g[i] for g in after)
        if b is not None and a is not None:
            out.append((label, b, a))
    return out


def _churn(alloc, blocks, lo: float, edge: float, since: float, hi: float) -> str:
    """The caching allocator's cudaMalloc/cudaFree calls per step, before -> after the onset,
    when they rose by at least _CHURN_MORE per step to _CHURN_TIMES the rate before: a named
    cause, put first (each call synchronous on the host; ``torch.cuda.empty_cache()`` each step,
    or memory pressure, makes them). A steady job makes almost none."""
    before = _counter_per_step([(a[0], a[2]) for a in alloc if lo <= a[0] < edge], blocks, lo, edge)
    after = _counter_per_step([(a[0], a[2]) for a in alloc if since <= a[0] <= hi], blocks, since, hi)
    if before is None or after is None or after - before < _CHURN_MORE or after < _CHURN_TIMES * before:
        return ""
    return (f"allocator churn: cudaMalloc/cudaFree {before:.1f} -> {after:.1f} per step (the cache emptied "
            f"or under memory pressure; each call waits on the host)")


def _busier(gpu, lo: float, edge: float, since: float) -> tuple[str, ...]:
    """The device's activities (GPM) that rose by _BUSIER or more across the onset, as
    ("tensor activity 16% -> 22%", ...): more device work, which a host waiting on a full
    launch queue also shows as host time."""
    moved = _gpm_moves([g for g in gpu if lo <= g[0] < edge], [g for g in gpu if g[0] >= since])
    return tuple(f"{label} {b:.0%} -> {a:.0%}" for label, b, a in moved
                 if label != "DRAM bandwidth" and a - b >= _BUSIER)


def _retries(alloc, since: float) -> str:
    before = [a[1] for a in alloc if a[0] < since]
    after = [a[1] for a in alloc if a[0] >= since]
    if before and after and after[-1] > before[-1]:
        return f"allocator retries +{after[-1] - before[-1]}"
    return ""
