"""The window after-effect check on real H100 jobs' step boundaries (tests/data/real),
replayed as the agent feeds it (bench/aftereffect_real.py has the full table)."""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("aftereffect_real", os.path.join(ROOT, "bench", "aftereffect_real.py"))
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
DEFAULT, OLD = "60 s before, 2% or the wobble before (default)", "25 s before, 2%"


def load(name):
    return bench.boundaries(os.path.join(ROOT, "tests", "data", "real", name))


def test_a_dip_just_before_a_window_is_no_after_effect():
    """h100b_1gpu_s (a launch-bound 13 ms job): its steps dipped 12% in the 25 s before its
    fourth window and came back after it. The agent live (25 s before, 2%) backed off on it as
    +11.4%; the default rule sees the dip as the job's own wobble."""
    times, prof = load("h100b_1gpu_s.jsonl.gz")
    old = [(w, round(r, 3)) for w, r, lasting in bench.replay(times, prof, OLD) if lasting]
    assert old == [(3, 1.114)]
    assert [w for w, _, lasting in bench.replay(times, prof, DEFAULT) if lasting] == []


@pytest.mark.parametrize("name", ["h100b_1gpu_m_pauses.jsonl.gz", "h100_2gpu_m.jsonl.gz"])
def test_a_lasting_13_percent_after_a_window_is_found_and_nothing_without_it(name):
    """On 44-49 ms jobs: no back-off as recorded; each window after which every step is made
    13% slower is found by its own check."""
    times, prof = load(name)
    assert not [r for _, r, lasting in bench.replay(times, prof, DEFAULT) if lasting]
    found = 0
    for k, (first, last) in enumerate(bench.sessions(prof)):
        if times[-1] - times[last] < 60:
            continue
        slowed = bench.slowed(times, last, 0.13)
        got = [lasting for w, _, lasting in bench.replay(slowed, prof, DEFAULT, until=slowed[last] + 60) if w == k]
        assert got in ([], [True]), (k, got)
        found += bool(got)
    assert found >= 3
