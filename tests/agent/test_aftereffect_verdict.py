"""The verdict tests/gpu/test_healthy_ddp_gpu.py gives on windows (tests/_aftereffect_verdict.py),
on the real clocks of its own live run on 2 x H200 (tests/data/real/clocks): what that run could
decide, and that the after-effects seen on real GPUs before, put into its clock, are shown."""

from __future__ import annotations

import gzip
import json
import pathlib

import pytest

import _aftereffect_verdict as v

CLOCKS = pathlib.Path(__file__).resolve().parents[1] / "data" / "real" / "clocks"


@pytest.fixture(scope="module")
def live():
    with gzip.open(CLOCKS / "h200s_2gpu_m_healthy_ddp_r0.json.gz", "rt") as fh:
        d = json.load(fh)
    return d["windowed_step_s"], v.runs(d["windowed_profiled_steps"]), d["plain_step_s"]


def _slowed(own: list, windows: list, x: float) -> list:
    """``own`` made ``1 + x`` slower from the end of each of ``windows`` on (cumulative)."""
    out = list(own)
    for _, last in windows:
        out = out[:last] + [t * (1 + x) for t in out[last:]]
    return out


def test_the_live_run_had_too_few_windows_to_decide(live):
    """Live, the 0.5% budget stretched windows every 30 s to one per 2,048-3,072 steps: the
    warm-up session at step 33, then 1,025, 4,097 and 6,145, of which two have 400 steps on
    either side in 330 s. Their ratios ran 3% above the no-window job's at the same steps, with
    a standard error of 2.3%: neither figure resolves 4%, so the run decides nothing (the test
    now asks the budget for several windows)."""
    windowed, windows, plain = live
    assert windows[0] == (33, 37) and [w[0] for w in windows[1:]] == [1025, 4097, 6145]
    got = v.verdict(windowed, windows, plain)
    assert got["windows"] == [[1025, 1029], [4097, 4101]]
    assert got["slower"] == [] and got["undecided"] == ["each", "first"], got
    assert 0.0 < got["each"]["effect"] < 0.05 and 0.02 < got["each"]["se"] < 0.03, got["each"]


def test_the_second_live_run_had_its_windows_and_still_could_not_decide():
    """The test in its present form (a 2% budget), live on 2 x H200 a lease later: five windows
    judged, each one's ratio within 1% of the no-window job's at the same steps, but with a
    standard error of 2.8% (the host's waves: 250-step medians 43.7-53.4 ms), and the first
    window +4% with 5% error: undecided, nothing shown - the host's wander, not the verdict,
    is what one 5-minute job cannot get past."""
    with gzip.open(CLOCKS / "h200t_2gpu_m_healthy_ddp_r0.json.gz", "rt") as fh:
        d = json.load(fh)
    windows = v.runs(d["windowed_profiled_steps"])
    got = v.verdict(d["windowed_step_s"], windows, d["plain_step_s"])
    assert [w[0] for w in got["windows"]] == [1025, 2049, 3073, 4097, 5121], got["windows"]
    assert got["slower"] == [] and got["undecided"] == ["each", "first"], got
    assert abs(got["each"]["effect"]) < 0.01 and 0.02 < got["each"]["se"] < 0.04, got["each"]
    # +5% after each window put into this clock is still not resolved: the error is the host's
    assert v.verdict(_slowed(d["windowed_step_s"], windows, 0.05), windows, d["plain_step_s"])["slower"] == []


def test_the_third_live_run_bounds_the_cost_it_cannot_resolve():
    """A third lease (2026-11-30), the same test: five windows judged, each -1.3% against the
    no-window job (SE 2.6%), the first -0.4% (SE 4.0%; that job's ratios 0.95-1.05): undecided
    again. What it does bound, put into its own clock: +13% for good after the first analysed
    window is shown (the issue's figure), and so is +8% after each window; +5% after each is not."""
    with gzip.open(CLOCKS / "h200za_2gpu_m_healthy_ddp_r0.json.gz", "rt") as fh:
        d = json.load(fh)
    windowed, plain = d["windowed_step_s"], d["plain_step_s"]
    windows = v.runs(d["windowed_profiled_steps"])
    got = v.verdict(windowed, windows, plain)
    assert [w[0] for w in got["windows"]] == [1025, 2049, 3073, 4097, 5121], got["windows"]
    assert got["slower"] == [] and got["undecided"] == ["each", "first"], got
    assert -0.03 < got["each"]["effect"] < 0.0 and 0.02 < got["each"]["se"] < 0.03, got["each"]
    assert "first" in v.verdict(_slowed(windowed, windows[1:2], 0.13), windows, plain)["slower"]
    assert "each" in v.verdict(_slowed(windowed, windows, 0.08), windows, plain)["slower"]
    assert v.verdict(_slowed(windowed, windows, 0.05), windows, plain)["slower"] == []


def test_a_level_that_steps_up_after_the_first_window_and_stays_is_shown(live):
    """+13% for good after a window, the 2 x H200 figure, in the live clock from its first
    analysed window on: the later window sees no change, the first shows it."""
    windowed, windows, plain = live
    got = v.verdict(_slowed(windowed, windows[1:2], 0.13), windows, plain)
    assert "first" in got["slower"], got
    assert got["first"]["effect"] == pytest.approx(0.15, abs=0.02)
    assert v.verdict(windowed, windows, plain)["slower"] == []  # (as recorded: not shown)


def test_windows_that_each_leave_the_job_slower_are_shown(live):
    """+5% after each window (cumulative) in the live clock: each window's ratio is 5% above
    the no-window job's, beyond twice the standard error."""
    windowed, windows, plain = live
    got = v.verdict(_slowed(windowed, windows, 0.05), windows, plain)
    assert "each" in got["slower"], got


def test_the_same_clock_on_both_sides_has_no_effect():
    own = [0.05 + 0.001 * ((k * 7919) % 13) for k in range(6000)]
    windows = [(k, k + 4) for k in (1024, 2048, 3072, 4096, 5120)]
    got = v.verdict(own, windows, own)
    assert got["each"]["effect"] == pytest.approx(0.0, abs=1e-12)
    assert got["first"]["effect"] == pytest.approx(got["ratios"][0] - sum(got["ratios"]) / 5)
    assert got["slower"] == [] and len(got["windows"]) == 5


def test_a_window_without_both_spans_is_left_out():
    own = [0.05] * 1000
    assert v.ratio(own, 100, 104) is None  # 99 steps before it
    assert v.ratio(own, 500, 504) == 1.0
    assert v.ratio(own, 700, 704) is None  # 246 steps after its gap
    assert v.verdict(own, [(500, 504)], own)["undecided"] == ["each", "first"]  # one is not enough
