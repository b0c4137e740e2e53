"""The rank's step time since its start (state/_life.py): bounded however long the job, each
point the mean step time of its span, spans doubling when full, batches cut anywhere giving the same
points as one step at a time, and a clock that steps back moving no point."""

from __future__ import annotations

import random
import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from stepwatch.collector.state._life import LifeTrend


def _job(seed: int, n: int):
    rng, t, rows = random.Random(seed), 1.7e9, []
    for k in range(1, n + 1):
        d = 0.04 * (1.5 if k > n // 2 else 1.0) * rng.uniform(0.9, 1.1)
        t += d
        rows.append((k, t, d))
    return rows


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), cuts=st.lists(st.integers(1, 400), min_size=1, max_size=40))
def test_batches_cut_anywhere_give_the_points_of_one_step_at_a_time(seed, cuts):
    rows = _job(seed, 6000)
    one, many = LifeTrend(points=16), LifeTrend(points=16)
    for k, t, d in rows:
        one.add([k], [t], [d])
    i, c = 0, 0
    while i < len(rows):
        part = rows[i:i + cuts[c % len(cuts)]]
        many.add([r[0] for r in part], [r[1] for r in part], [r[2] for r in part])
        i, c = i + len(part), c + 1
    assert many.span_s == one.span_s and len(many.document()) == len(one.document())
    for a, b in zip(many.document(), one.document()):  # (sums in another order: the last bits)
        assert a[:2] == b[:2] and abs(a[2] - b[2]) <= 1e-12 * b[2]


def test_the_points_stay_bounded_and_keep_the_step_up():
    rows = _job(3, 60_000)  # ~40 min of 40-60 ms steps
    life = LifeTrend(points=20, span_s=10.0)
    for i in range(0, len(rows), 100):
        part = rows[i:i + 100]
        life.add([r[0] for r in part], [r[1] for r in part], [r[2] for r in part])
    doc = life.document()
    assert len(doc) < 20 and life.span_s > 10.0  # merged (spans doubled), never over the bound
    assert [p[0] for p in doc] == sorted(p[0] for p in doc) and doc[0][0] == 1
    first, last = doc[0][2], doc[-1][2]
    assert 0.038 < first < 0.042 and 0.057 < last < 0.063, (first, last)  # both levels


def test_a_span_is_the_mean_of_its_steps_and_a_clock_step_back_moves_no_point():
    life = LifeTrend(points=100, span_s=10.0)
    durs = [0.01 * (1 + k % 7) for k in range(300)]
    ends = [1000.0 + 0.05 * k for k in range(300)]  # 15 s: one closed span of 10 s, one open
    life.add(list(range(300)), ends, durs)
    (p,) = life.document()
    inside = [d for d, t in zip(durs, ends) if t < 1010.0]
    assert p[0] == 0 and p[1] == max(t for t in ends if t < 1010.0) and abs(p[2] - statistics.fmean(inside)) < 1e-12
    life.add([300], [900.0], [0.5])  # the agent's clock stepped back: joins the open span
    assert life.document() == [p]
