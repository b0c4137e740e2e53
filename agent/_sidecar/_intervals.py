"""Half-open time intervals ``(start, end)``: union, length, intersection, clipping.

Pure functions on plain floats (any unit), used by the window analysis. An interval with
``end <= start`` is empty and ignored. "Merged" means sorted, pairwise disjoint and
non-adjacent, as returned by :func:`union`.
"""

from __future__ import annotations

from typing import Iterable, List, Sequence, Tuple

__all__ = ["Interval", "clip", "intersection", "length", "subtract_length", "union"]

Interval = Tuple[float, float]


def union(intervals: Iterable[Interval]) -> List[Interval]:
    """The union of ``intervals`` as a merged list; O(n log n). Touching intervals merge."""
    merged: List[Interval] = []
    for start, end in sorted(iv for iv in intervals if iv[1] > iv[0]):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def length(merged: Sequence[Interval]) -> float:
    """Total length of a merged list."""
    return sum(end - start for start, end in merged)


def intersection(a: Sequence[Interval], b: Sequence[Interval]) -> List[Interval]:
    """Intersection of two merged lists, merged; O(len(a) + len(b))."""
    out: List[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > start:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract_length(a: Sequence[Interval], b: Sequence[Interval]) -> float:
    """Length of ``a`` not covered by ``b`` (both merged)."""
    return length(a) - length(intersection(a, b))


def clip(merged: Sequence[Interval], lo: float, hi: float) -> List[Interval]:
    """A merged list restricted to ``[lo, hi)`` (empty when ``hi <= lo``)."""
    out = [(max(s, lo), min(e, hi)) for s, e in merged if e > lo and s < hi]
    return [(s, e) for s, e in out if e > s]
