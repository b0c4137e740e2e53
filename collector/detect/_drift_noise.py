"""Noise: a drift detector's measure of the job's own spread at each test window, and the reach
that spread allows (the smallest sustained shift each severity raises now).

Each test window's spread is the robust spread of the difference between the medians of two
adjacent runs of that length, divided by sqrt(2), over the quiet history (the last
``noise_history_s`` but the newest ``info_window_s``, so a fresh shift can raise before it
widens the spread) and over the same span with the newest included, the smaller taken: a hump
in the settling time, which the lagged history holds for its first minutes, would set the
spreads for 5-8 minutes alone (a held-out H200 job: critical spread 2.74% at arming, 1.41% from
the whole history). Differences, not deviations from a centre: a slow ramp inside the history
would otherwise widen the spread it is judged by; the median of the differences moves little
for one step inside the span. Backtest on every real recording (bench/results/
detection_real_noise_recent.md): held out +3% 17 -> 23, +5% 19 -> 27, +10% 30 -> 37 of 51
raised in time, no false episode added. Until the history holds enough of a long window, the
spread of the longest window it does hold stands in (a median over a longer window moves less).
"""

from __future__ import annotations

import math
from typing import Optional

from .._ring import Ring
from ._types import CRITICAL, INFO, WARNING, median

__all__ = ["Noise", "RAISE", "SIGMA_FLOOR", "run_differences"]

SIGMA_FLOOR = 0.002  # log units (0.2%): keeps z finite on perfectly steady series
# A measured level this close to a severity's ratio raises it: the settled level itself sits
# anywhere in the job's early noise (a real 44 ms H100 job: its first 4 minutes 0.2-2% above
# its later level), so an exact +5% can measure +4.5%. Info, the lowest level, at 0.7.
RAISE = {INFO: 0.7, WARNING: 0.8, CRITICAL: 0.8}
_NOISE_SAMPLES = 6  # runs of a window the quiet history must hold for its own spread


class Noise:
    """``spreads``: {severity: log spread of its window's medians} once measured; ``reach``:
    {severity: ratio} for those spreads (a dict replaced whole: the scrape and API threads read
    it). ``n``: buckets per severity's window; ``n_noise``: buckets of quiet history used."""

    def __init__(self, z: float, n: dict, n_noise: int, ratio: dict):
        self.z, self.n, self.n_noise, self.ratio = z, n, n_noise, ratio
        self.spreads: dict[str, float] = {}
        self.reach: Optional[dict[str, float]] = None
        self.rows = 0  # history rows the spreads were last measured over
        # spreads carried over a collector restart and the rows they were measured over: until
        # the restarted history holds as many, a measurement never lowers them (:meth:`carry`)
        self._carried: Optional[tuple[dict, int]] = None

    def carry(self, spreads: dict, rows: int) -> None:
        """Take up ``spreads`` measured before a collector restart over ``rows`` history rows.
        Until the history again holds that many, each measurement keeps at least them: a
        wandering host's 90-s medians spread less over the few minutes a restarted history holds
        than over its half hour (a launch-bound H200 job, tests/data/real/h200zw: the warning
        window's reach 13.8% over the job's history, 4.5% measured five minutes after a restart;
        its host's +5.3% then raised a warning into which the optimizer's pulse after it folded)."""
        self.spreads, self.rows = dict(spreads), rows
        self._carried = (dict(spreads), rows) if spreads and rows > 0 else None
        self.measure_reach()

    def get(self, sev: str) -> float:
        """The severity's spread, the floor where none is measured."""
        return self.spreads.get(sev, SIGMA_FLOOR)

    def reset(self) -> None:
        """Forget the spreads (the rank settles again)."""
        self.spreads, self.reach, self.rows, self._carried = {}, None, 0, None

    def update(self, history: Ring) -> None:
        """Measure the spreads again over ``history`` ((first step, end time, log summary,
        quiet 1/0) rows)."""
        hist, lag = history, (self.n[INFO] if self.spreads else 0)
        n_hist = min(len(hist), self.n_noise + lag)
        rows = list(zip(hist.tail(2, n_hist), hist.tail(3, n_hist)))
        ys = [y for y, quiet in rows[:max(0, n_hist - lag)] if quiet]
        # ... and over as long a span with the newest included: the smaller spread is taken (one
        # fresh step moves the median of the differences little; a hump in the settling time,
        # which the lagged history alone holds for minutes, is diluted sooner)
        ys_all = [y for y, quiet in rows[max(0, n_hist - self.n_noise):] if quiet] if lag else []
        noise, spread = self.spreads, None
        for sev in (CRITICAL, WARNING, INFO):  # shortest first: it stands in for longer ones
            n = self.n[sev]
            lagged = self.spread(ys, n)
            own = [v for v in (lagged, self.spread(ys_all, n)) if v is not None]
            if lagged is None and sev in noise and own:
                own.append(noise[sev])  # the lagged history cannot measure it yet
            if own:
                spread = noise[sev] = min(own)
            elif spread is not None and sev not in noise:
                # Provisional, until the history holds enough of this window: a shorter run's
                # spread scaled as for independent buckets, doubled (real series wobble: the
                # medians of longer runs shrink more slowly than that).
                noise[sev] = max(2 * spread * math.sqrt(self.n[CRITICAL] / n), SIGMA_FLOOR)
        if not noise and len(ys) >= 3:
            center = median(ys)
            noise[CRITICAL] = max(1.4826 * median([abs(y - center) for y in ys]), SIGMA_FLOOR)
        if noise:
            last = noise.setdefault(CRITICAL, SIGMA_FLOOR)
            for sev in (WARNING, INFO):  # a longer window's spread never exceeds a shorter one's
                last = noise[sev] = min(noise.get(sev, last), last)
        self.rows = n_hist
        if self._carried is not None:
            carried, rows = self._carried
            if n_hist >= min(rows, hist.maxlen):  # (a history that can never hold as many: full)
                self._carried = None  # (measured over as much history as they were)
            else:
                self.rows = rows
                for sev, v in carried.items():
                    noise[sev] = max(noise.get(sev, v), v)
        self.measure_reach()

    def measure_reach(self) -> None:
        """Keep the reach for the spreads just measured (a scrape of 10,000 ranks then reads a
        kept dict per rank instead of computing it): per severity the larger of its raise
        threshold and ``z`` times its spread, as a ratio."""
        self.reach = {sev: math.expm1(max(math.log1p(RAISE[sev] * self.ratio[sev]), self.z * self.get(sev)))
                      for sev in (CRITICAL, WARNING, INFO)}

    @staticmethod
    def spread(ys: list, n: int) -> Optional[float]:
        """The robust spread of the difference between the medians of adjacent runs of ``n``
        buckets in ``ys``, divided by sqrt(2); None when ``ys`` holds too few runs."""
        if len(ys) < 2 * n + _NOISE_SAMPLES:
            return None
        return max(1.4826 * median(run_differences(ys, n)) / math.sqrt(2), SIGMA_FLOOR)


def run_differences(ys: list, n: int) -> list:
    """The absolute differences between the medians of adjacent runs of ``n`` values of ``ys``
    (runs taken every quarter run, so each difference spans one run's length)."""
    stride = max(1, n // 4)
    meds = [median(ys[i:i + n]) for i in range(0, len(ys) - n + 1, stride)]
    gap = max(1, n // stride)
    return [abs(b - a) for a, b in zip(meds, meds[gap:])]
