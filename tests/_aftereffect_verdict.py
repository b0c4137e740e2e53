"""Did profiler windows leave a job slower? Decided from the job's own step clocks (host time
per step after ``loss.item()``), against a job of the same script on the same GPUs with no
window, whose clocks at the same step numbers show what the job's own wander does over the same
distance.

Two figures, each a difference of after/before median ratios (the ``after`` steps from ``gap``
past a window's last profiled step, the ``before`` steps up to its first):

- ``each``: the mean ratio over the windows less the mean over the no-window job's ratios at
  the same steps (a window that costs each time it runs);
- ``first``: the first window's ratio less that same mean (a level that steps up after the
  first session and stays, as the +13% on 2 x H200 did: later windows then see no change).

Each comes with its standard error from the spread of the ratios (the no-window job's alone for
``first``). A figure counts as shown slower than ``limit`` when ``effect - 2 SE > limit``, and
the run as undecided when ``2 SE > resolution``: on the H200 host of 2026-11-29 the no-window
job's 500-step medians wandered 46.9-50.9 ms and its ratios 0.95-1.015, so one 5-minute job
resolves about 2-3%, not the 1% the overhead target asks of a 10-minute A/B (bench/, alternated
arms)."""

from __future__ import annotations

import math
import statistics

from stepwatch.collector.tools.corpus import around, runs  # noqa: F401 (runs: for the tests)

BEFORE, GAP, AFTER = 400, 50, 400


def ratio(own: list, first: int, last: int):
    """After/before medians around steps first..last (step k is own[k - 1]); None where the
    clock does not hold both whole spans."""
    return around(own, first, last, BEFORE, GAP, AFTER)


def _se(*groups) -> float:
    return math.sqrt(sum(statistics.variance(g) / len(g) for g in groups if len(g) > 1))


def verdict(windowed: list, windows: list, plain: list, limit: float = 0.01,
            resolution: float = 0.04) -> dict:
    """``windowed``: the clock of the job with windows; ``windows``: its (first, last) profiled
    steps, the warm-up session included (it is a session like the others); ``plain``: the
    clock of the job without any, on the same GPUs. Returns the figures and ``slower`` (a list of
    what was shown slower than ``limit``) and ``undecided`` (the figures that cannot resolve
    ``resolution``)."""
    pairs = [(w, ratio(windowed, *w), ratio(plain, *w)) for w in windows]
    pairs = [(w, x, y) for w, x, y in pairs if x is not None and y is not None]
    out = {"windows": [list(w) for w, _, _ in pairs], "ratios": [x for _, x, _ in pairs],
           "plain_ratios": [y for _, _, y in pairs], "slower": [], "undecided": []}
    if len(pairs) < 2:
        out["undecided"] = ["each", "first"]
        return out
    xs, ys = out["ratios"], out["plain_ratios"]
    mean_y = statistics.fmean(ys)
    figures = {"each": (statistics.fmean(xs) - mean_y, _se(xs, ys)),
               "first": (xs[0] - mean_y, math.sqrt(statistics.variance(ys) * (1 + 1 / len(ys))))}
    for name, (effect, se) in figures.items():
        out[name] = {"effect": effect, "se": se}
        if effect - 2 * se > limit:
            out["slower"].append(name)
        if 2 * se > resolution:
            out["undecided"].append(name)
    return out
