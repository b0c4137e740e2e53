"""collector._ring.Ring against the semantics it stands for: ``collections.deque(maxlen=...)``
of rows, whatever mix of row appends, column extends, clears and copies fills it."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepwatch.collector._ring import Ring

_OPS = st.lists(st.one_of(st.tuples(st.just("append"), st.integers(0, 0)),
                          st.tuples(st.just("columns"), st.integers(0, 90)),
                          st.tuples(st.just("rows"), st.integers(0, 40)),
                          st.tuples(st.just("clear"), st.integers(0, 0)),
                          st.tuples(st.just("copy"), st.integers(0, 0))), max_size=40)


def _row(types: str, value: int, nullable: bool, draw) -> tuple:
    return tuple(None if nullable and draw(st.booleans()) else (float(value + c) if t == "d" else value + c)
                 for c, t in enumerate(types))


@settings(max_examples=300, deadline=None)
@given(types=st.sampled_from(["d", "Qdd", "qd", "dq"]), maxlen=st.integers(1, 70), ops=_OPS,
       nullable=st.booleans(), data=st.data())
def test_ring_reads_as_a_deque_of_rows(types, maxlen, ops, nullable, data):
    if nullable and "Q" in types:
        types = types.replace("Q", "q")
    ring, want, value = Ring(types, maxlen, nullable=nullable), collections.deque(maxlen=maxlen), 0
    witness = Ring(types, maxlen, nullable=nullable)  # (an empty ring of the same types reads shared columns)
    for op, k in ops:
        if op == "append":
            row = _row(types, value, nullable, data.draw)
            ring.append(*row)
            want.append(row)
            value += 1
        elif op in ("columns", "rows"):
            rows = [_row(types, value + i, nullable, data.draw) for i in range(k)]
            value += k
            if op == "columns":
                ring.extend_columns(*([r[c] for r in rows] for c in range(len(types))))
            else:
                ring.extend(rows)
            want.extend(rows)
        elif op == "clear":
            ring.clear()
            want.clear()
        else:
            ring = ring.copy()
        assert len(ring) == len(want) and bool(ring) == bool(want)
        assert list(ring) == list(want)
        if want:
            i = data.draw(st.integers(-len(want), len(want) - 1))
            assert ring[i] == want[i]
        n = data.draw(st.integers(0, maxlen + 5))
        for c in range(len(types)):
            if nullable:  # (tail and column read the stored NaN / -1: the evidence's rings are read by rows)
                continue
            column = [r[c] for r in want]
            assert ring.tail(c, n) == (column[-n:] if n else [])
            assert sorted(ring.column(c)) == sorted(column)  # (as stored: rotated, for sums and extremes)
    with pytest.raises(IndexError):
        ring[len(want)]
    # no write went into the empty columns that every empty ring of these types shares
    for empty in (witness, Ring(types, maxlen, nullable=nullable)):
        assert not empty and len(empty) == 0 and list(empty) == []
        assert all(len(empty.column(c)) == 0 for c in range(len(types)))


def test_an_empty_ring_holds_no_columns_of_its_own_until_its_first_row():
    """A rank's 15 rings hold 104 columns; most stay empty for a rank that connects and goes
    (bench/results/connection_churn_2core.md): an empty ring reads columns shared with every empty
    ring of its types, makes its own at its first row, and shares again once cleared."""
    a, b = Ring("Qdd", 10), Ring("Qdd", 10)
    assert a._cols is b._cols
    a.append(1, 2.0, 3.0)
    assert a._cols is not b._cols and not b and list(a) == [(1, 2.0, 3.0)]
    c = Ring("Qdd", 3)
    c.extend_columns([1, 2, 3, 4, 5], [0.0] * 5, [1.0] * 5)  # more than maxlen into an empty ring
    assert list(c) == [(3, 0.0, 1.0), (4, 0.0, 1.0), (5, 0.0, 1.0)] and not b
    a.clear()
    assert a._cols is b._cols and not a
    assert a.copy()._cols is b._cols  # (an empty ring's copy: empty, shared too)


def test_ring_memory_stays_at_maxlen():
    """Appending forever keeps maxlen values per column, written in place once full (a ring
    that appended and cut its oldest values every eighth of maxlen cost 1-2% less CPU per step
    and 14% more resident memory per rank: the cuts reallocated every column,
    bench/results/ingest_path_2core.md, ninth session)."""
    ring = Ring("dd", 100)
    for i in range(10_000):
        ring.extend_columns([float(i)] * 7, [1.0] * 7)
        assert len(ring._cols[0]) <= 100
    assert len(ring) == 100 and ring[-1] == (9999.0, 1.0) and ring[0] == (9985.0, 1.0)  # 14 batches of 7, 2 rows of the one before
