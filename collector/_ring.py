"""Bounded rings of numeric rows kept in typed arrays.

A ``collections.deque`` of tuples costs a tuple and a float object per number: 300 steps of
trend for 10,000 ranks were 12 million objects, every one of them walked by each full garbage
collection (16% of the collector's ingest time at 10,000 ranks, py-spy on the bench). A
:class:`Ring` keeps one ``array`` per column; rows are made as tuples only when read.
"""

from __future__ import annotations

from array import array
from typing import Iterable, Iterator

__all__ = ["Ring"]


_NONE = {"d": float("nan"), "q": -1}  # what stands for None in a nullable ring's column


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
        self._cols = [array(t) for t in types]
        self._start = 0
        self.extend(rows)

    def extend(self, rows: Iterable[tuple]) -> None:
        for row in rows:
            self.append(*row)

    def append(self, *row) -> None:
        if self._nullable:
            row = tuple(_NONE[t] if v is None else v for t, v in zip(self._types, row))
        cols = self._cols
        if len(cols[0]) < self.maxlen:
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
        if self._nullable:
            row = tuple(None if (v != v if t == "d" else v == -1) else v for t, v in zip(self._types, row))
        return row

    def __iter__(self) -> Iterator[tuple]:
        n = len(self._cols[0])
        start = self._start if n == self.maxlen else 0
        for j in list(range(start, n)) + list(range(0, start)):
            yield self._row(j)

    def __bool__(self) -> bool:
        return len(self._cols[0]) > 0

    def clear(self) -> None:
        self._cols = [array(t) for t in self._types]
        self._start = 0

    def copy(self) -> "Ring":
        dup = Ring(self._types, self.maxlen, nullable=self._nullable)
        dup._cols = [array(t, col) for t, col in zip(self._types, self._cols)]
        dup._start = self._start
        return dup
