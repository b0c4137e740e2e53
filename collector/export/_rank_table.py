"""The ranks one scrape exports, read from the state once, as columns.

A scrape of 10,000 ranks writes about 27 series per rank. Copying every rank's state and
walking the copies per family costs about 30 us per rank before any text is written
(bench/results/ingest_path_2core.md); here the state is read in one pass, a chunk of ranks at a time under the state lock, one ``map`` per
field over the chunk; the families then write their lines with one comprehension each over
these lists.

What ingest replaces whole (protobuf samples, the Hello, the GPU identity, the agent stats) is
kept by reference; what it changes in place (bucket counts, the windows deque, the event counts)
is copied.
"""

from __future__ import annotations

import operator
from typing import Callable, Optional

from ..wire import Samples
from ..state import CollectorState, mean_step_s, wait_ratio
from ..state import no_pause

__all__ = ["RankTable", "aligned"]

# Columns read as they are: each attribute of _PLAIN under its own name, then the histograms'
# counts and sums: (column, getter).
_PLAIN = ("job", "rank", "hello", "gpu", "streams", "steps_total", "recent_added", "last_step_time",
          "samples_total", "samples_known", "tokens_total", "tokens_known", "allocator", "gpu_sample", "host",
          "stats", "phases")
_PLAIN_GET = tuple((name, operator.attrgetter(name)) for name in _PLAIN) + (
    ("step_count", operator.attrgetter("step_hist.count")), ("step_sum", operator.attrgetter("step_hist.sum")),
    ("wait_count", operator.attrgetter("wait_hist.count")), ("wait_sum", operator.attrgetter("wait_hist.sum")))
_STEP_COUNTS = operator.attrgetter("step_hist.counts")
_WAIT_COUNTS = operator.attrgetter("wait_hist.counts")
_WINDOWS = operator.attrgetter("windows")
_EVENT_COUNTS = operator.attrgetter("event_counts")


class RankTable:
    """One list per field, a rank per index, in (job, rank) order. ``sums``: each rank's
    (wait, duration) over its last steps; ``step_counts``/``wait_counts``: bucket counts
    (tuples); ``windows``: the kept windows (tuples, oldest first); ``event_counts`` (``full``
    only, else empty)."""

    def __init__(self, full: bool = False):
        self.full = full
        for name, _ in _PLAIN_GET:
            setattr(self, name, [])
        self.sums: list = []
        self.step_counts: list = []
        self.wait_counts: list = []
        self.windows: list = []
        self.event_counts: list = []
        self._kinds: dict = {}
        self._columns: dict = {}

    @classmethod
    def read(cls, state: CollectorState, full: bool = False, pause: Callable[[], None] = no_pause,
             frozen: bool = False) -> "RankTable":
        """The table of every rank of ``state`` (``pause`` and ``frozen`` as
        :meth:`CollectorState.read_ranks`)."""
        table = cls(full)
        state.read_ranks(table.add, pause=pause, frozen=frozen)
        return table

    def add(self, states: list) -> None:
        """Append ``states`` (:meth:`CollectorState.read_ranks` calls it: the state lock held, or
        nothing writing beside)."""
        for name, get in _PLAIN_GET:
            getattr(self, name).extend(map(get, states))
        self.sums += [st.sums() for st in states]
        self.step_counts += map(tuple, map(_STEP_COUNTS, states))
        self.wait_counts += map(tuple, map(_WAIT_COUNTS, states))
        self.windows += map(tuple, map(_WINDOWS, states))
        if self.full:
            self.event_counts += map(dict, map(_EVENT_COUNTS, states))

    def __len__(self) -> int:
        return len(self.job)

    def samples(self, kind: str) -> tuple[Samples, Optional[list]]:
        """The latest samples of ``kind`` (``allocator``, ``gpu_sample``, ``host``, ``stats``) of
        the ranks that have one, and those ranks' indices (None: every rank has one)."""
        got = self._kinds.get(kind)
        if got is None:
            records = getattr(self, kind)
            if None in records:
                index = [i for i, r in enumerate(records) if r is not None]
                got = Samples([records[i] for i in index]), index
            else:
                got = Samples(records), None
            self._kinds[kind] = got
        return got

    def raw(self, kind: str, name: str) -> list:
        """The latest ``kind`` sample's ``name`` per rank as read; None where a rank has no such
        sample or the sample does not carry the (optional) field."""
        col = self._columns.get((kind, name))
        if col is None:
            samples, index = self.samples(kind)
            if not samples.records:
                col = [None] * len(self)
            else:
                optional = samples.records[0].DESCRIPTOR.fields_by_name[name].has_presence
                col = samples.optional(name) if optional else samples[name]
                if index is not None:
                    col = aligned(col, index, len(self))
            self._columns[(kind, name)] = col
        return col

    def field(self, kind: str, name: str) -> list:
        """:meth:`raw` as floats (as the series are exported)."""
        col = self._columns.get((kind, name, float))
        if col is None:
            col = self._columns[(kind, name, float)] = [None if v is None else float(v) for v in self.raw(kind, name)]
        return col

    def wait_ratio(self) -> list:
        """Each rank's data-loader wait share of its last steps (:func:`._state.wait_ratio`)."""
        col = self._columns.get("wait_ratio")
        if col is None:
            col = self._columns["wait_ratio"] = [wait_ratio(w, d) for w, d in self.sums]
        return col

    def recent_step_s(self) -> list:
        """Each rank's mean step time over its last steps (:func:`._state.mean_step_s`)."""
        col = self._columns.get("recent_step_s")
        if col is None:
            col = self._columns["recent_step_s"] = list(map(mean_step_s, [s[1] for s in self.sums],
                                                            self.recent_added))
        return col

    def jobs(self) -> list[tuple[str, int, int]]:
        """``(job, start, end)``: each job's ranks are ``[start:end]``."""
        out, jobs, start = [], self.job, 0
        for i in range(1, len(jobs) + 1):
            if i == len(jobs) or jobs[i] != jobs[start]:
                out.append((jobs[start], start, i))
                start = i
        return out


def aligned(values: list, index: list, n: int) -> list:
    """``values`` of the ranks at ``index`` spread over ``n`` ranks, None elsewhere."""
    out: list = [None] * n
    for i, v in zip(index, values):
        out[i] = v
    return out
