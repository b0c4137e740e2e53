"""One rank's throughput drift, judged twice: on each bucket's median and on its floor.

Real GPU hosts wobble in two ways, and one statistic sees each. **Excursions**: on 40 ms H200
jobs the steps sit on a floor with runs of slower ones (the host busy elsewhere); how many
runs a minute holds wanders, so the 30 s medians of a healthy 1-GPU job went 40.6 -> 43.6 ms in
two minutes while its 10th percentiles stayed at 39.9-40.5 ms. A cost the job adds to every step
moves the floor: 4.2 ms of host work from 200 s on (bench/real_job.py ``--inject host``) put
the 10th percentiles at 44.3 ms and the medians where they had already wandered (2 x H200,
bench/results/real_h200zb.md). **The whole host slower**: three H100 jobs on one host got 3-4%
slower at 12:46 UTC in their medians and ~1% in their floors (more steps disturbed, the fast
ones as fast): the median sees it.

So each rank runs two :class:`DriftDetector`: ``median`` (each bucket's median: the detector
documented there, with the agent's own cost, persistence and every rule) and ``floor`` (the same
rules on each bucket's ``floor_quantile``, 0.1 by default; its summaries say "p10 step"). An
episode is raised when either raises; it keeps the detector that raised it, and takes the other's
condition only when that one stands at a higher severity (severity only rises) or when its own
clears while the other's is still open (the episode goes on, at no lower severity, showing the
figure it stood at until the other reaches its severity: never a figure under it). A further
change of the shown detector's episode, or the other's onset a critical window or more from the
shown one when its episode is shown at its higher severity, is a further change of the pair's
episode (``Condition.change`` counts them). An episode
shown without evidence of its own (decided by the step times alone, or not known) shows the
other detector's while that one's open episode has it (``_with_evidence``). Backtest on
the real corpus, same split and command, medians alone vs both (bench/results/detection_real_floor.md):
held out +3% within 10 min 23 -> 28/54, +5% within 3 min 28 -> 36/54, +10% within 60 s
39 -> 41/54; false episodes 0 -> 2 (one healthy 2-GPU recording whose whole step distribution
stepped up +8% for its last 80 s: the floor raises it, the medians do not).

Costs: two detectors' buckets per rank: the collector's ingest path 9.1 -> 10.7 us per step
(bench/results/ingest_path_2core.md).
``floor_quantile`` 0 runs the median alone. Not thread-safe, like the detectors.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from ._config import DriftConfig
from ._drift import DriftDetector
from ._drift_episode import DriftText
from ._types import SEVERITIES, Condition

__all__ = ["RankDrift"]

_RANK = {sev: i for i, sev in enumerate(SEVERITIES)}  # info 0, warning 1, critical 2


class RankDrift:
    """The interface of :class:`DriftDetector` the engine uses, over ``median`` and ``floor``
    (None when ``floor_quantile`` is 0). ``condition`` is the episode's condition or None."""

    def __init__(self, cfg: DriftConfig, job: str, rank: int, evidence=None):
        self.median = DriftDetector(cfg, job, rank, evidence=evidence)
        self._evidence = evidence
        q = cfg.floor_quantile
        self.floor: Optional[DriftDetector] = DriftDetector(cfg, job, rank, q, evidence) if q > 0 else None
        self._src: Optional[DriftDetector] = None  # the detector whose episode is shown
        self.condition: Optional[Condition] = None
        self._switches = 0
        self._moved = 0  # the shown episode's further changes (its ``change``)
        self._own: tuple = (None, 0)  # (the shown detector, its own count) at the last choice
        self._far_s = cfg.critical_window_s
        self._reach: tuple = (None, None, None)  # (median's reach dict, floor's, their minimum)

    def _both(self) -> tuple:
        return (self.median,) if self.floor is None else (self.median, self.floor)

    def _pick(self) -> bool:
        """Choose the shown condition after the detectors moved; True when it changed."""
        old = self.condition
        open_ = [d for d in self._both() if d.condition is not None]
        if not open_:
            if old is not None and self.floor is not None:  # (the rank's episode ended: on both)
                self.median.follow_end(self.floor)
                self.floor.follow_end(self.median)
            self._src, self.condition, self._moved, self._own = None, None, 0, (None, 0)
            return old is not None
        best = max(open_, key=lambda d: _RANK[d.condition.severity])  # the median first on a tie
        src = self._src
        if src is None or src.condition is None or _RANK[best.condition.severity] > _RANK[src.condition.severity]:
            if src is not best:
                self._switches += 1
            src = best
        self._src = src
        c = src.condition
        if old is not None and _RANK[c.severity] < _RANK[old.severity]:
            # handed over at a lower severity: the episode keeps its severity and shows the figure
            # it stood at (its peak), never a lower one that would contradict it (a live H200 job's
            # critical optimizer episode read "+4.5% ... p10 step" for 65 s when its median cleared),
            # with the evidence and the onset its text names
            c = dataclasses.replace(c, severity=old.severity, summary=old.summary, ratio=max(c.ratio, old.ratio),
                                    evidence=old.evidence, decided=old.decided, since=old.since, step=old.step,
                                    text=old.text)
        held = next((d.condition for d in (src, *open_) if d.condition.decided == "job"), None)
        if c.decided != "job" and held is not None:
            c = _with_evidence(c, held)
        own = (src, src.condition.change)
        if old is not None and c.since != old.since and (abs(c.since - old.since) >= self._far_s
                                                          or own[1] > 0 and own != self._own):
            # a further change to the alert book, which takes the newest onset only when
            # ``change`` moves: the onset shown moved to a further change of a detector's own, or
            # to the other detector's onset a critical window or more from it (nearer, it dated
            # the same change: the onset shown stays, as its text says). A live H200 job's slower
            # loader was raised critical by the floor 20 s after it began, its text its own, while
            # the alert kept the median's onset of a host's +6.7% 92 s earlier for 57 s more:
            # each detector counted no change of its own (tests/data/real/diag/h200zzb)
            self._moved += 1
        elif old is not None and c.since != old.since:
            c = _at_onset(c, old)
        self._own = own
        c = dataclasses.replace(c, change=self._moved)
        self.condition = c
        return c != old

    # -- steps ----------------------------------------------------------------------------------
    def feed(self, step: int, time: float, value: float) -> bool:
        return self._fed(lambda d: d.feed(step, time, value))

    def feed_many(self, step: list, end_time_s: list, duration_s: list) -> bool:
        return self._fed(lambda d: d.feed_many(step, end_time_s, duration_s))

    def _fed(self, feed) -> bool:
        """``feed`` (one detector's call) to each detector, then one settling again makes the
        other follow and the shown condition is chosen; True when it changed."""
        before = [(d.resettles, d.condition is None) for d in self._both()]
        for d in self._both():
            feed(d)
        self._follow(before)
        return self._pick()

    def _follow(self, before: list) -> None:
        """One detector just found that a shift began before it armed and settles again: the
        other settles again from the same onset (the job had not settled; a change mid-bucket
        dated a bucket apart by a median and a 10th percentile must not be raised by one and
        learnt by the other). ``before``: (resettles, no episode open) of each before the steps; an
        episode the other opened with these same steps is dropped unshown."""
        if self.floor is None:
            return
        for d, other, (was, _), (_, quiet) in ((self.median, self.floor, before[0], before[1]),
                                              (self.floor, self.median, before[1], before[0])):
            since = d.settling_again_since
            if d.resettles > was and since is not None:
                if quiet and other.condition is not None:
                    other.end_episode()
                other.settle_again(since)

    def note_window(self, step: int, time: float) -> None:
        for d in self._both():
            d.note_window(step, time)

    # -- the episode ----------------------------------------------------------------------------
    def end_episode(self) -> None:
        for d in self._both():
            d.end_episode()
        self._pick()

    def the_jobs_own(self, evidence: str) -> bool:
        changed = [d.the_jobs_own(evidence) for d in self._both()]
        return self._pick() or any(changed)

    def backed_off(self, t: float, message: str) -> bool:
        changed = [d.backed_off(t, message) for d in self._both()]
        return self._pick() or any(changed)

    def reference_span(self) -> Optional[tuple[float, float]]:
        return (self._src or self.median).reference_span()

    # -- state ----------------------------------------------------------------------------------
    @property
    def armed(self) -> bool:
        return self.median.armed

    def settled(self) -> Optional[tuple]:
        """The median detector's :meth:`DriftDetector.settled`."""
        return self.median.settled()

    @property
    def settling_again_since(self) -> Optional[float]:
        return self.median.settling_again_since

    @property
    def armed_at(self) -> Optional[float]:
        return self.median.armed_at

    @property
    def baseline_s(self) -> Optional[float]:
        """The median detector's current level (seconds): the step time users read."""
        return self.median.baseline_s

    @property
    def pauses(self) -> dict:
        return self.median.pauses

    def reach(self) -> Optional[dict[str, float]]:
        """Per severity the smaller of the two detectors' reach (either raises); None while the
        median detector is not armed (``armed`` is its); kept while neither detector measured
        its spreads again (a scrape reads it for every rank)."""
        med = self.median.reach()
        flo = self.floor.reach() if self.floor is not None else None
        if med is None or flo is None:
            return med
        if self._reach[0] is not med or self._reach[1] is not flo:
            self._reach = (med, flo, {sev: min(v, flo.get(sev, v)) for sev, v in med.items()})
        return self._reach[2]

    @property
    def version(self) -> int:
        return sum(d.version for d in self._both()) + self._switches

    def state(self) -> Optional[dict]:
        """Both detectors' :meth:`DriftDetector.state` (the median's alone where the floor is
        off) and the spreads the rank's evidence measured its sources in (one source not yet
        measured is measured here: :meth:`RankEvidence.measure_unread`); None before the median
        detector is armed."""
        med = self.median.state()
        if med is None:
            return None
        out = {"v": 2, "median": med, "shown": "floor" if self._src is self.floor and self.floor else "median",
               "moved": self._moved}
        if self.floor is not None:
            out["floor"] = self.floor.state()
        if self._evidence is not None:  # (what the evidence reads its sources' spreads as)
            self._evidence.measure_unread(self.median.loud)
            out["sources"] = self._evidence.noise.saved()
            out["blocks"] = self._evidence.saved_blocks()
        return out

    def restore(self, state: dict) -> None:
        """Take up :meth:`state`; a state saved before the floor detector (one detector's
        state) restores the median detector, and the floor settles afresh."""
        if state.get("v") == 2 and isinstance(state.get("median"), dict):
            self.median.restore(state["median"])
            if self._evidence is not None:
                self._evidence.noise.restore(state.get("sources"))
                self._evidence.restore_blocks(state.get("blocks"))
            if self.floor is not None and isinstance(state.get("floor"), dict):
                self.floor.restore(state["floor"])
            shown = self.floor if state.get("shown") == "floor" and self.floor is not None else self.median
            self._src = shown if shown.condition is not None else None
            moved = state.get("moved")  # (a state saved before the pair counted: the detector's count)
            self._moved = moved if isinstance(moved, int) and moved >= 0 else (
                shown.condition.change if shown.condition is not None else 0)
        else:
            self.median.restore(state)
        self._pick()


def _at_onset(c: Condition, old: Condition) -> Condition:
    """``c``, the other detector's date of the change ``old`` shows (under a critical window
    apart), shown at ``old``'s onset: the alert book keeps that onset, so the text says it too
    (the detectors dated a 2-GPU job's backward pulse at steps 5,090 and 5,190: the alert's step
    is the first, and so is its text's "since step")."""
    c = dataclasses.replace(c, since=old.since, step=old.step)
    return c if old.step is None else _rendered(c, step=old.step)


def _with_evidence(c: Condition, held: Condition) -> Condition:
    """``c`` (decided by the step times alone, or not known) shown with the evidence of the other
    detector's open episode ``held``: the pair's episode is then a change of the job, and its text
    says so. A live H200 job's 213 tiny operators in forward were raised first on the 10th
    percentiles, whose evidence read at their own onset found forward's host time +4.0 ms and
    backward's +2.6 ms (not concentrated), while the medians' episode, opened seconds later, was
    held by forward's time: the alert read that no evidence held it beside its decided "job"
    (tests/data/real/diag/h200zt). Only the text and the evidence shown change: each detector
    keeps its own episode and its own rules."""
    c = dataclasses.replace(c, evidence=held.evidence, decided="job")
    return _rendered(c, evidence=held.evidence, decided="job", on_top=False)


def _rendered(c: Condition, **parts) -> Condition:
    """``c`` with ``parts`` of its summary's typed parts (``Condition.text``, a :class:`DriftText`)
    changed and its summary made anew from them; ``c`` as it is where it has none."""
    if not isinstance(c.text, DriftText):
        return c
    text = dataclasses.replace(c.text, **parts)
    return dataclasses.replace(c, text=text, summary=str(text))
