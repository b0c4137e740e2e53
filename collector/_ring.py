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
    values themselves are finite and non-negative: non-finite records stop at ingest).

    Each column is an array in order, oldest first: new values are appended (``fromlist``, in
    C), and the oldest are cut off only once an eighth of ``maxlen`` (at least 32) more has
    piled up: one memmove per that many rows, at most that much more memory. Writing in place at a rotating start cost an array and a slice
    per column per batch, twice what appending does; reads are a few per scrape or
    diagnosis, against one write per batch."""

    __slots__ = ("maxlen", "_types", "_cols", "_nullable", "_cap")

    def __init__(self, types: str, maxlen: int, rows: Iterable[tuple] = (), nullable: bool = False):
        if maxlen < 1:
            raise ValueError("maxlen must be >= 1")
        if nullable and not set(types) <= set(_NONE):
            raise ValueError("a nullable ring takes only 'd' and 'q' columns")
        self.maxlen, self._types, self._nullable = maxlen, types, nullable
        self._cap = maxlen + max(32, maxlen // 8)  # values a column holds before its oldest are cut
        self._cols = [array(t) for t in types]
        self.extend(rows)

    def extend(self, rows: Iterable[tuple]) -> None:
        for row in rows:
            self.append(*row)

    def extend_columns(self, *columns: list) -> None:
        """Append rows given column by column (equal-length lists, not other sequences): the
        same ring as ``append`` row by row."""
        if not columns[0]:
            return
        if self._nullable:  # None stored as NaN / -1, a column at a time
            columns = tuple([_NONE[t] if v is None else v for v in values] if None in values else values
                            for t, values in zip(self._types, columns))
        cols = self._cols
        for col, values in zip(cols, columns):
            col.fromlist(values)  # (from a list: three times extend()'s speed)
        if len(cols[0]) > self._cap:
            self._trim()

    def _trim(self) -> None:
        cut = len(self._cols[0]) - self.maxlen
        for col in self._cols:
            del col[:cut]

    def _first(self) -> int:
        """The index, in every column, of the oldest value the ring holds."""
        return max(0, len(self._cols[0]) - self.maxlen)

    def column(self, index: int) -> array:
        """Column ``index``, oldest first (a copy when older values are still stored)."""
        col = self._cols[index]
        return col[len(col) - self.maxlen:] if len(col) > self.maxlen else col

    def tail(self, index: int, n: int) -> list:
        """The newest ``n`` values of column ``index``, oldest first."""
        col = self._cols[index]
        n = min(n, len(col), self.maxlen)
        return col[len(col) - n:].tolist() if n > 0 else []

    def append(self, *row) -> None:
        if self._nullable and None in row:
            row = tuple(_NONE[t] if v is None else v for t, v in zip(self._types, row))
        cols = self._cols
        for col, value in zip(cols, row):
            col.append(value)
        if len(cols[0]) > self._cap:
            self._trim()

    def __len__(self) -> int:
        return min(len(self._cols[0]), self.maxlen)

    def __getitem__(self, index: int) -> tuple:
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("ring index out of range")
        return self._row(self._first() + index)

    def _row(self, j: int) -> tuple:
        row = tuple(col[j] for col in self._cols)
        return self._nulls(row) if self._nullable else row

    def _nulls(self, row: tuple) -> tuple:
        return tuple(None if (v != v if t == "d" else v == -1) else v for t, v in zip(self._types, row))

    def __iter__(self) -> Iterator[tuple]:
        first = self._first()
        columns = [col[first:].tolist() if first else col.tolist() for col in self._cols]
        if not self._nullable:
            return zip(*columns)  # rows made in C
        return (self._nulls(row) for row in zip(*columns))

    def __bool__(self) -> bool:
        return len(self._cols[0]) > 0

    def clear(self) -> None:
        self._cols = [array(t) for t in self._types]

    def copy(self) -> "Ring":
        dup = Ring(self._types, self.maxlen, nullable=self._nullable)
        first = self._first()
        dup._cols = [col[first:] for col in self._cols]
        return dup
