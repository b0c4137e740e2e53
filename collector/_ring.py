"""Bounded rings of numeric rows kept in typed arrays.

A ``collections.deque`` of tuples costs a tuple and a float object per number: 300 steps of
trend for 10,000 ranks are 12 million objects, every one of them walked by each full garbage
collection (16% of the collector's ingest time at 10,000 ranks, py-spy on the bench). A
:class:`Ring` keeps one ``array`` per column; rows are made as tuples only when read.

An empty ring holds no arrays of its own: it reads a set of empty columns shared by every empty
ring of its types, and makes its own on its first row (a rank holds 15 rings of 104 columns,
~7.5 KB of empty arrays before its first sample; most stay empty for a rank that connects and
goes, bench/results/connection_churn_2core.md).
"""

from __future__ import annotations

from array import array
from typing import Iterable, Iterator

__all__ = ["Ring"]


_NONE = {"d": float("nan"), "q": -1}  # what stands for None in a nullable ring's column
_EMPTY: dict[str, list] = {}  # types -> the empty columns every empty ring of them reads (never written)


def _empty(types: str) -> list:
    cols = _EMPTY.get(types)
    if cols is None:
        cols = _EMPTY[types] = [array(t) for t in types]
    return cols


class Ring:
    """Like ``deque(maxlen=...)`` of equal-length numeric tuples: ``append(*row)``, ``extend``,
    ``len``, iteration oldest first, ``ring[i]`` (negative too), ``clear``, ``copy``. ``types``
    gives each column's array type code ("Q": uint64 as the wire's steps, "q": int64, "d":
    float). ``nullable``: None is kept as NaN ("d") or -1 ("q"), and read back as None (the
    values themselves are finite and non-negative: non-finite records stop at ingest)."""

    __slots__ = ("maxlen", "_types", "_cols", "_start", "_nullable")

    def __init__(self, types: str, maxlen: int, rows: Iterable[tuple] = (), nullable: bool = False):
        if maxlen < 1:
            raise ValueError("maxlen must be >= 1")
        if nullable and not set(types) <= set(_NONE):
            raise ValueError("a nullable ring takes only 'd' and 'q' columns")
        self.maxlen, self._types, self._nullable = maxlen, types, nullable
        self._cols = _empty(types)  # (its own from its first row: append, extend_columns)
        self._start = 0
        self.extend(rows)

    def extend(self, rows: Iterable[tuple]) -> None:
        for row in rows:
            self.append(*row)

    def extend_columns(self, *columns: list) -> None:
        """Append rows given column by column (equal-length lists, not other sequences): the
        same ring as ``append`` row by row, written with array slices."""
        k = len(columns[0])
        if k <= 1:
            if k:
                self.append(*[values[0] for values in columns])
            return
        if not self._cols[0]:  # (an empty ring reads the shared empty columns: its own now)
            self._cols = [array(t) for t in self._types]
        if self._nullable:  # None stored as NaN / -1, a column at a time
            columns = tuple([_NONE[t] if v is None else v for v in values] if None in values else values
                            for t, values in zip(self._types, columns))
        cols, m = self._cols, self.maxlen
        room = m - len(cols[0])
        if room >= k:  # room for all: the ring starts at 0 (the usual batch until it is full)
            for col, values in zip(cols, columns):
                col.fromlist(values)  # (lists: three times extend()'s speed)
            return
        if room > 0:  # room for some
            take = room
            for col, values in zip(cols, columns):
                col.fromlist(values[:take])
            columns, k = tuple(values[take:] for values in columns), k - take
        if k >= m:
            self._cols = [array(t, values[k - m:]) for t, values in zip(self._types, columns)]
            self._start = 0
            return
        i = self._start
        first = min(k, m - i)
        if first == k:  # (no wrap: the columns as they are)
            for t, col, values in zip(self._types, cols, columns):
                col[i:i + k] = array(t, values)
        else:
            for t, col, values in zip(self._types, cols, columns):
                col[i:i + first] = array(t, values[:first])
                col[:k - first] = array(t, values[first:])
        self._start = (i + k) % m

    @property
    def types(self) -> str:
        """Each column's array type code, as given."""
        return self._types

    def column(self, index: int) -> array:
        """Column ``index`` as stored (rotated: for sums and extremes, not for order); read only (an
        empty ring's is shared)."""
        return self._cols[index]

    def tail(self, index: int, n: int) -> list:
        """The newest ``n`` values of column ``index``, oldest first."""
        col, size = self._cols[index], len(self._cols[index])
        n = min(n, size)
        if size < self.maxlen or self._start == 0:
            return col[size - n:].tolist()
        end = self._start  # the newest value sits just before the start
        if n <= end:
            return col[end - n:end].tolist()
        return col[size - (n - end):].tolist() + col[:end].tolist()

    def append(self, *row) -> None:
        if self._nullable and None in row:
            row = tuple(_NONE[t] if v is None else v for t, v in zip(self._types, row))
        cols = self._cols
        n = len(cols[0])
        if n < self.maxlen:
            if not n:  # (an empty ring reads the shared empty columns: its own now)
                self._cols = cols = [array(t) for t in self._types]
            for col, value in zip(cols, row):
                col.append(value)
        else:
            i = self._start
            for col, value in zip(cols, row):
                col[i] = value
            self._start = (i + 1) % self.maxlen

    def __len__(self) -> int:
        return len(self._cols[0])

    def __getitem__(self, index: int) -> tuple:
        n = len(self._cols[0])
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("ring index out of range")
        j = (self._start + index) % self.maxlen if n == self.maxlen else index
        return self._row(j)

    def _row(self, j: int) -> tuple:
        row = tuple(col[j] for col in self._cols)
        return self._nulls(row) if self._nullable else row

    def _nulls(self, row: tuple) -> tuple:
        return tuple(None if (v != v if t == "d" else v == -1) else v for t, v in zip(self._types, row))

    def __iter__(self) -> Iterator[tuple]:
        start = self._start  # 0 until the ring is full
        columns = [col[start:].tolist() + col[:start].tolist() if start else col.tolist() for col in self._cols]
        if not self._nullable:
            return zip(*columns)  # rows made in C
        return (self._nulls(row) for row in zip(*columns))

    def __bool__(self) -> bool:
        return len(self._cols[0]) > 0

    def clear(self) -> None:
        self._cols = _empty(self._types)
        self._start = 0

    def copy(self) -> "Ring":
        dup = Ring(self._types, self.maxlen, nullable=self._nullable)
        if self._cols[0]:
            dup._cols = [array(t, col) for t, col in zip(self._types, self._cols)]
        dup._start = self._start
        return dup
