"""``/api/life``: a job's step time over its life (the last hour by default), downsampled on the
collector into one summary series, so the page's life chart costs the same at 2 ranks or 1,000.

Each rank keeps its whole life in at most 360 span means (``state._life.LifeTrend``). An answer
cuts the asked range (the last ``since_s`` of the job's data time, or its whole life) into at most
``LIFE_BINS`` bins of at least ``MIN_BIN_S``; per bin, each rank's mean of its spans ending there,
then across ranks their median, lowest and highest. ``rank``: that rank's own series instead, in
the same bins. Times are the agents' data times (a span's end), as every chart's are. Cost: one
pass over the job's spans, read a chunk of ranks at a time with ingest going on between chunks:
0.15 s of CPU at 1,000 ranks of 358 spans each on the 2-core development machine (the last hour
or the whole life alike), an answer of 240 points (12 KB) whatever the ranks.
"""

from __future__ import annotations

import json
import math
import statistics
from typing import Any, Callable, Optional

from ..state import CollectorState, no_pause

__all__ = ["LIFE_BINS", "MIN_BIN_S", "life_document", "life_json", "life_query"]

LIFE_BINS = 240  # points of an answer at most (the chart is 720 units wide)
MIN_BIN_S = 10.0  # no finer than the spans a rank starts with
DEFAULT_SINCE_S = 3600.0
_MAX_SINCE_S = 366 * 86400.0


def life_query(query: dict) -> tuple[Optional[str], Optional[float], Optional[int]]:
    """(error text, since_s, rank) from ``/api/life``'s query: ``since_s`` seconds (default an
    hour; ``0`` or ``all``: the whole life), ``rank`` a whole number."""
    since: Optional[float] = DEFAULT_SINCE_S
    raw = query.get("since_s")
    if raw is not None:
        if raw in ("0", "all"):
            since = None
        else:
            try:
                since = float(raw)
            except ValueError:
                since = math.nan
            if not (math.isfinite(since) and 0 < since <= _MAX_SINCE_S):
                return f"since_s= must be seconds from 1 to {_MAX_SINCE_S:.0f}, or 0 / all for the whole life, not {raw[:40]!r}", None, None
    rank = query.get("rank")
    if rank is not None:
        if not (rank.isascii() and rank.isdigit() and int(rank) < 1_000_000):
            return f"rank= must be a whole number under 1000000, not {rank[:40]!r}", None, None
        rank = int(rank)
    return None, since, rank


def life_document(state: CollectorState, job: str, since_s: Optional[float] = DEFAULT_SINCE_S,
                  rank: Optional[int] = None, pause: Callable[[], None] = no_pause) -> dict[str, Any]:
    """``{"job", "rank", "since_s", "first_s", "last_s", "whole", "bin_s", "ranks",
    "points": [[end time, median s, lowest s, highest s], ...]}``, oldest first: ``ranks`` is how
    many ranks the points summarise; ``first_s`` / ``last_s`` the range asked (data times; None
    with no closed span yet); ``whole``: the range holds the whole life. ``since_s`` None: the
    whole life."""
    lives: list = []

    def read(chunk):
        for st in chunk:
            if (rank is None or st.rank == rank) and len(st.life):
                lives.append(st.life.copy())

    state.read_ranks(read, job, pause=pause)
    doc: dict[str, Any] = {"job": job, "rank": rank, "since_s": since_s, "first_s": None, "last_s": None,
                           "whole": True, "bin_s": None, "ranks": len(lives), "points": []}
    if not lives:
        return doc
    last = max(x.last_end() for x in lives)
    first = min(x.first_end() for x in lives)
    lo = first if since_s is None else max(first, last - since_s)
    width = max(MIN_BIN_S, (last - lo) / LIFE_BINS)
    n = max(1, min(LIFE_BINS, math.ceil((last - lo) / width)))
    per_bin: list[list] = [[] for _ in range(n)]
    ends = [-math.inf] * n
    for life in lives:
        sums, counts = [0.0] * n, [0] * n
        for end, mean in zip(*life.since(lo)):
            if not math.isfinite(mean):
                continue
            k = min(n - 1, int((end - lo) / width))
            sums[k] += mean
            counts[k] += 1
            ends[k] = max(ends[k], end)
        for k in range(n):
            if counts[k]:
                per_bin[k].append(sums[k] / counts[k])
    doc.update(first_s=lo, last_s=last, whole=lo == first, bin_s=width,
               points=[[ends[k], statistics.median(v), min(v), max(v)] for k, v in enumerate(per_bin) if v])
    return doc


def life_json(state: CollectorState, job: str, since_s: Optional[float], rank: Optional[int],
              pause: Callable[[], None] = no_pause) -> bytes:
    return json.dumps(life_document(state, job, since_s, rank, pause), allow_nan=False).encode()
