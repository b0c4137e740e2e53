"""Throughput drift of one rank, judged in seconds of job time against the job's own noise.

Per step the engine feeds a step time (seconds, normalised to the first token count seen when
tokens are reported). Steps the agent profiled, marked steps and the engine's warm-up steps
never reach this detector.

**Buckets.** Steps are summarised as the median of each ``bucket_s`` of data time (at least
``min_bucket_steps`` steps); the detector judges bucket medians (log seconds), never single
steps: a machine's speed wobbles over seconds whatever the step length (real H100 jobs:
medians of 10 s of 8 ms steps ranged 0.89-1.32x of the job's median; of 44 ms steps
0.99-1.05x; tests/data/real/README.md). ``quantile`` other than 0.5 summarises each bucket by
that quantile instead (the engine runs one detector on the medians and one on the 10th
percentiles per rank: _drift_pair.RankDrift); "median" below means that summary.

**Warm-up and settling.** The first ``warmup_s`` after the rank's first step are not judged
(compilation, allocator growth, the loader starting, the first profiler windows). The next
``settle_s`` give the job's **settled level**: the median of those buckets. From then on the
detector is *armed* (``armed``). A shift it then finds whose onset lies inside the settling
time (more than a bucket before arming) is not raised: the job had not settled, so the rank is
disarmed and settles again from that onset (at most twice; a change before arming is the job's
level, as always) - unless it began at the end of one of the agent's profiler windows, which is
raised as stepwatch's own cost (below) wherever it falls. The settled level never follows the job up: a slow ramp is
measured against it however long it takes.

**A slow change, decided by its evidence since settling** (``ShiftTests.since_settled``). A
warning-sized shift above the settled level that stays under ``z`` spreads (a host that wanders)
and that no onset's evidence holds (a ramp: the level before any onset holds most of it) is
raised when the loader's wait, or the device time beyond the host time of a compute phase the
launches paced, read against the rank's settling span holds it and stands ``evidence_z`` of its
own spreads out (not a phase's device time itself: it drifts over minutes by itself); its
episode stays open while that evidence stays grown, however the host's pace moves the step under
it and whatever further change comes on top (``ShiftTests.slow_holds``). Their levels while the
rank settled are kept once read, and saved with the drift state.

**Noise** (:mod:`._drift_noise`). The job's own spread at each test window, from the quiet
history (buckets outside episodes, the last ``noise_history_s``). A shift must stand ``z``
spreads out to raise; ``reach()``
says, per severity, the smallest sustained shift that can raise now (on the real corpus, read
240 s in, it foretold whether a +10% change was raised critical within 60 s on 20 of 23
recordings: bench/results/detection_reach_real.md).

**Pauses** (:mod:`._drift_buckets`). A step at least ``pause_ratio`` x the current level is a
pause step (evaluation, checkpoint, stall): counted and left out of every bucket, unless its run
shows the level moved.

**Tests.** For each severity, from the highest: over its window (``critical_window_s``,
``warning_window_s``, ``info_window_s``) the median of the buckets against two references —
the settled level ("vs this job's level settled at HH:MM") and the level just before the window (the
median of the preceding ``max(window, 120 s)``, "vs the level before"; after a collector restart
into an open episode, not that episode's buckets: :meth:`ShiftTests.leave_out`) — must be at least
``0.8 x`` the severity's ratio (``0.7 x`` for info), ``z`` noise spreads, and two thirds of the
window's buckets must stand above half the shift (sustained, not one spike). A critical shift
raised from no episode that is under 1.5x ``critical_ratio`` (+15%) must also stand above half
its size on two thirds of the last ``critical_sustain`` x ``critical_window_s`` (45 s): a
healthy 40 ms H200 job rose +8..13% for 25 s and came back (tests/data/real/h200q_1gpu_m, paged
critical live); a lasting +10% is raised ~31 s after it began (median over the real corpus,
bench/results/agent_ab_h200q.md). The onset is the maximum-likelihood change point of the
buckets since the reference, moved later to where a source of evidence changed when that is more
than two buckets after it and the source, read from there against the steps' level there, holds
the step's change (``ShiftTests.date_by_evidence``: a host that wandered up before the job
changed dated the change at the wander, with the phase that changed diluted under it).

**A shift that nothing holds.** When the rank's phase times were compared at the raise's onset
and nothing the agent measures holds the shift (no phase, loader wait, allocator calls, device
work or GPU busy time: the host's own pace, as far as it can tell), and it does not begin at a
profiler window's end, it is raised only at its severity's full ratio (not 0.8x) and once two
thirds of the last two of that severity's windows stand above half of it
(:meth:`ShiftTests.enough`); otherwise the next severity down is tried, and a shift short of
that does not settle the rank again either (it is no finding). A healthy 2 x H200 job's
floor stood +8.4% for its last 76 s with nothing holding it (tests/data/real/
h200t_2gpu_m_sched_short, held out: a false critical); on the real corpus's held-out part false
episodes went 2 -> 0, and with the evidence pulses 18 -> 4; what is raised later for it: changes
that only a slower host's signature shows (host work in every phase, +5%: 61 -> 109 s; tiny
operators that grew forward's and backward's host time: 50 -> 95 s, when forward's time holds
them; bench/results/detection_unbacked_more.md).

**Waves.** An episode that ends by itself within ``transient_s`` of its onset was the job's
own wandering (a real 2-GPU H100 job, tests/data/real/h100c_2gpu_m: 10 s medians 41-54 ms in
waves of minutes, with or without the agent's windows). For the next ``noise_history_s``, a
shift no larger than 1.25x such a wave's peak raises only once it has stood 1.5x the wave's
length: the first wave is raised (nothing told it apart yet), the next ones are not, and a
lasting change of that size is raised minutes later than on a steady job. Larger shifts are
raised as before. Waves are not kept across a collector restart.

**The agent's own cost.** The engine tells the detector where each profiler window ended
(``note_window``). A shift whose onset is within two buckets of a window's end, where the 10
kept steps after the window stand at least half the shift above the 10 before it, is raised
as ``StepwatchProfilerOverhead`` naming the window, not as throughput drift: stepwatch's cost,
which the agent itself backs off from (agent/_aftereffect.py) - unless its evidence there is one
phase's device time not paced by the host, the loader's wait or the allocator's calls
(``_NO_WINDOW_MAKES``): no window makes those. When the diagnosis then finds a
cause no window makes (allocator churn, a longer data-loader wait: ``the_jobs_own``), the episode
becomes throughput drift and says what it was first taken for.

**Episodes.** Severity only rises while the change lasts, one level at a time (each raise is
kept in the episode's history by the alert book). **A further change** inside an episode (the
critical window's level a critical shift, or the warning window's a warning shift, by the
rules of a raise, and half the shift already raised, above the level the episode was raised on)
is never folded in silently: the episode takes the new onset (``Condition.change`` counts them), its summary names where the episode began, and the alert
book keeps what was raised before (``Alert.earlier``), so the diagnosis is made again for the
new onset. The ratio and summary follow the sustained level (the
median of the last ``warning_window_s``). The condition clears once the median of the last
``clear_s`` (only buckets after the onset) is back under half of ``info_ratio`` and under 40% of
the shift it was raised on. Once an episode ends, no test window and no onset reaches back into
it: the next shift is judged, and dated, on buckets after its end. O(1)
per step amortised; the noise spreads are recomputed once a minute (a few hundred sorts of
short lists). Not thread-safe: one caller at a time.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

from .._ring import Ring
from ._config import DriftConfig
from ._drift_buckets import StepBuckets
from ._drift_episode import Episode
from ._drift_noise import RAISE
from ._drift_state import drift_state, restore_drift
from ._drift_tests import Found, ShiftTests, estimate_onset, source_of
from ._evidence import PHASE_TIMES
from ._names import THROUGHPUT_DRIFT
from ._types import CRITICAL, INFO, SEVERITIES, WARNING, Condition, Kind, median

if TYPE_CHECKING:
    from ._evidence import RankEvidence

__all__ = ["DriftDetector"]

_NOISE_EVERY = 12  # buckets between recomputations of the noise spreads
# A shift raised after arming with its onset inside the settling time settles the rank again,
# at most this many times (then it is raised: a job whose level never holds is still judged)
_RESETTLE_MAX = 2
_MAX_BUCKETS = 4096  # history kept (5 s buckets: 5.7 h)
# An episode clears once the level is back under this share of the shift it was raised on (and
# under half of info_ratio): a real +3% hovering at +2.1% against the settled level must not clear
_CLEAR_SHARE = 0.4
# A shift that began at a profiler window's end is the agent's after-effect unless its evidence
# is of these kinds, not paced by the host: one phase's device time, the loader's wait, the
# allocator's calls. The real after-effect (tests/data/real/diag/h200z_1gpu_s_window_aftereffect)
# was the host slower in every phase, no single source holding it; an optimizer's device time
# +4.5 ms/step on a 2 x H200 job with scheduled windows, its onset 20 s before a window's end,
# was raised as the agent's cost (bench/results/evidence_pulses_ended.md)
_NO_WINDOW_MAKES = (Kind.PHASE, Kind.LOADER, Kind.ALLOCATOR)
# An episode raised before its onset's phase times could be compared (too few 5-s blocks after a
# late onset) reads its evidence again each evaluation for this long after its onset
_REREAD_S = 120.0


class DriftDetector:
    """``feed`` / ``feed_many`` return True when ``condition`` (None or an active Condition)
    changed. ``pauses`` counts pause episodes by kind ("stall", "pause"); ``armed`` says
    whether the settled level is known; ``baseline_s`` is the current level in seconds. What it
    holds is in parts: the buckets and pauses (:class:`StepBuckets`), the noise
    (:class:`Noise`), the open episode (:class:`Episode`) and, here, the level, the settling and
    the tests."""

    def __init__(self, cfg: DriftConfig, job: str, rank: int, quantile: float = 0.5,
                 evidence: Optional["RankEvidence"] = None):
        self.cfg, self.job, self.rank = cfg, job, rank
        # the rank's evidence (_evidence.RankEvidence), None to judge the steps alone
        self._evidence = evidence if cfg.evidence else None
        self.quantile = quantile  # each bucket's steps summarised by this quantile (0.5: median)
        self._steps = StepBuckets(cfg, quantile, self._on_bucket)
        self._ep = Episode(cfg, job, rank, quantile, self._evidence is not None)
        # (first step, end time, log bucket median, quiet 1/0) of every bucket since settling
        self._history = Ring("Qddd", _MAX_BUCKETS)
        self._t = t = ShiftTests(cfg, self._history, cfg.noise_history_s, self._evidence)
        self._noise, self._n, self._n_before = t.noise, t.n, t.n_before
        self._settle: list[float] = []
        self._settled: Optional[float] = None  # log seconds
        self._settled_at: Optional[float] = None
        self._since_noise = 0
        self._resettles = 0  # times a shift with its onset in the settling time disarmed the rank
        self._resettled_from: Optional[float] = None  # that shift's onset (Unix time), the latest
        self.baseline_s: Optional[float] = None
        self._version = 0
        self._restored_open = False  # the open episode came from a saved state (restore_drift)

    # -- what it shows --------------------------------------------------------------------------
    @property
    def condition(self) -> Optional[Condition]:
        return self._ep.condition

    @property
    def pauses(self) -> dict:
        return self._steps.pauses

    @property
    def armed(self) -> bool:
        return self._settled is not None

    @property
    def resettles(self) -> int:
        """Times a shift found after arming with its onset in the settling time disarmed it."""
        return self._resettles

    @property
    def armed_at(self) -> Optional[float]:
        """Before arming, the data time (Unix) it arms at: ``warmup_s + settle_s`` after the
        rank's first judged step (or after a shift it settles again from); None once armed or
        before any step."""
        if self._settled is not None or self._steps.first_time is None:
            return None
        return self._steps.first_time + self.cfg.warmup_s + self.cfg.settle_s

    @property
    def settling_again_since(self) -> Optional[float]:
        """While the rank settles again (a shift found after arming began inside the settling
        time), that shift's onset (Unix time); else None."""
        return self._resettled_from if self._settled is None else None

    def reach(self) -> Optional[dict[str, float]]:
        """The smallest sustained step-time shift each severity can raise now, as a ratio
        (0.108: +10.8%), over its window (``critical_window_s``, ...): the larger of the
        severity's raise threshold and ``z`` times the job's spread at that window, as the tests
        require. None before the rank is armed. A shift no larger than one of the job's recent
        waves must also outlast it (not counted here). Read by the scrape and API threads: a dict
        the event loop replaces whole when it measures the spreads (once a minute)."""
        return self._noise.reach if self._settled is not None else None

    @property
    def version(self) -> int:
        """Changes whenever :meth:`state` would: arming, a new noise measurement, an episode."""
        return self._version + self._ep.version

    def settled(self) -> Optional[tuple]:
        """(settled seconds per step, log spread of ``warning_window_s`` medians) once armed,
        else None: the run's level that the job's later runs are compared with."""
        if self._settled is None:
            return None
        spreads = self._noise.spreads
        return math.exp(self._settled), spreads.get(WARNING, spreads.get(CRITICAL, 0.0))

    def loud(self) -> list[tuple[float, float]]:
        """The data times of its history inside episodes (what the evidence's own spreads leave
        out: :meth:`ShiftTests.loud`)."""
        return self._t.loud()

    def state(self) -> Optional[dict]:
        """What survives a collector restart (:func:`._drift_state.drift_state`)."""
        return drift_state(self)

    def restore(self, state: dict) -> None:
        """Take up :meth:`state` (:func:`._drift_state.restore_drift`)."""
        restore_drift(self, state)

    def reference_span(self) -> Optional[tuple[float, float]]:
        """The data times the open episode's reference level stands for: the job's settled level
        (the settle window after warm-up) when it was raised against that, else the span before
        its onset that its evidence was read against (at least 2 minutes, ending two buckets
        ahead of the onset: the level before); None with no episode or no such span. A
        diagnosis of the episode compares with those times: a change that grew in, or was dated
        late on a wandering host, then still has its "before" (a synchronize before the
        optimizer step on an H200, +2-4%: dated 76 s late, the blocks just ahead of the onset
        already held it); and one raised against the level before compares with that level,
        not with the job's whole past (a launch-bound H200 job 11.1 -> 13.4 ms after minutes at
        13-15 ms read "-0.0 ms/step", tests/data/real/diag/h200zp); so does a further change
        measured against the episode's level just before it (a slower loader after the host's
        own +12% read "no measured contributor explains the +6.2 ms/step" against the settled
        level, tests/data/real/diag/h200zr)."""
        if self.condition is None:
            return None
        if self._settled_at is not None and self._ep.ref == self._settled and not self._ep.against_before:
            return (self._settled_at - self.cfg.settle_s, self._settled_at)
        span = self._ep.backing_span
        return None if span is None else (span[0], span[1])

    # -- what it is told ------------------------------------------------------------------------
    def feed(self, step: int, time: float, value: float) -> bool:
        return self._steps.feed(step, time, value)

    def feed_many(self, step: list, end_time_s: list, duration_s: list) -> bool:
        """:meth:`feed` for each (a batch, as columns); True when ``condition`` changed."""
        return self._steps.feed_many(step, end_time_s, duration_s)

    def note_window(self, step: int, time: float) -> None:
        """A profiler window of the agent's ended at ``step`` (its last profiled step, Unix
        ``time``): a shift that starts there is the agent's after-effect, not the job's."""
        self._steps.note_window(step, time)

    def end_episode(self) -> None:
        """The open episode, if any, ends: its level came back, or the job ended (every rank
        disconnected)."""
        self._ep.end()
        self._restored_open = False

    def follow_end(self, other: "DriftDetector") -> None:
        """The rank's episode, last held by ``other`` (the same rank's other detector), ended: no
        test window of this one reaches back before that end either, nor reads what ``other``
        left out as a level before (:meth:`ShiftTests.leave_out`). Else its windows still held
        the episode once it was over and raised it again: on a 2 x H200 job with the agent's
        scheduled windows, the floors' evidence-less episode of 254-400 s was followed by the
        medians' warning dated at 269.5 s, fired at 485 s (tests/data/real/
        h200t_2gpu_m_sched_short, played nine times); on the real pulses, held out, 2 fewer
        false episodes (bench/results/evidence_pulses_pair_end.md)."""
        t, o = self._t, other._t
        if o.ended_at is not None and (t.ended_at is None or o.ended_at > t.ended_at):
            t.ended_at = o.ended_at
        for start, end in o.left_out:
            t.leave_out(start, end)

    def backed_off(self, t: float, message: str) -> bool:
        """The agent dropped a kind of profiler session (:meth:`Episode.backed_off`)."""
        return self._ep.backed_off(t, message)

    def the_jobs_own(self, evidence: str) -> bool:
        """The open overhead episode is the job's own (:meth:`Episode.the_jobs_own`)."""
        return self._ep.the_jobs_own(evidence)

    def settle_again(self, onset_at: float) -> bool:
        """Settle again from ``onset_at`` (Unix time) as a shift found after arming with its
        onset in the settling time does: the rank's other detector found one there (its bucket
        statistic dated the same change a bucket earlier). Nothing while not armed or with an
        episode open. True when it did."""
        if self._settled is None or self.condition is not None:
            return False
        since = [row[2] for row in self._history if row[1] > onset_at]
        self._resettle(onset_at, since)
        return True

    # -- buckets --------------------------------------------------------------------------------
    def _on_bucket(self, step: int, time: float, y: float) -> bool:
        cfg, first = self.cfg, self._steps.first_time
        if time - first < cfg.warmup_s:
            if self._steps.level is None:
                self._steps.level = y  # pauses need a level early
            return False
        if self._settled is None:
            self._settle.append(y)
            self._steps.level = median(self._settle)
            self.baseline_s = math.exp(self._steps.level)
            self._history.append(step, time, y, 1.0)
            if time - first >= cfg.warmup_s + cfg.settle_s and len(self._settle) >= 3:
                self._settled, self._settled_at = self._steps.level, time
                self._update_noise()
            return False
        self._history.append(step, time, y, 0.0 if self.condition is not None else 1.0)
        self._since_noise += 1
        if self._since_noise >= _NOISE_EVERY and self.condition is None:
            self._update_noise()
        return self._judge()

    def _update_noise(self) -> None:
        """The noise spreads measured again (:meth:`Noise.update`)."""
        self._version += 1
        self._since_noise = 0
        self._noise.update(self._history)

    def _set_level(self, y: float) -> None:
        self._steps.level = y
        self.baseline_s = math.exp(y)

    # -- judging --------------------------------------------------------------------------------
    def _judge(self) -> bool:
        old = self.condition
        if old is None:
            self._t.settled_at = self._settled_at
            for sev in (CRITICAL, WARNING, INFO):
                found = self._t.test(sev, self._settled)  # (a shift under z spreads that its evidence holds raises too)
                raised = None if found is None else self._raise(sev, found)
                if raised is not None:
                    return raised
            self._set_level(median(self._history.tail(2, min(len(self._history), self._n[CRITICAL]))))
            return False
        hist = self._history
        # the clear window never reaches back before the onset: just after a raise it would
        # hold mostly the old level (a critical raise holds 30 s, the clear window is 60 s)
        since = self._after_onset(self._t.n_clear)
        recent = median(hist.tail(2, max(1, since)))
        gone = recent - self._ep.ref >= min(math.log1p(self.cfg.info_ratio) / 2, _CLEAR_SHARE * self._ep.raised)
        if (not gone and not self._t.slow_holds(self._ep)) or self._t.evidence_gone(self._ep, recent, self._settled):
            # no test window reaches back into the episode that ended: the info window (240 s)
            # read 5 s after a +10% pulse's end still held it, and raised it again at +5%
            self._t.ended_at = hist[-1][1]
            lasted = hist[-1][1] - self._ep.onset[1]
            if (lasted <= self.cfg.transient_s and self._ep.alertname == THROUGHPUT_DRIFT
                    and self._ep.evidence()[0] is None):  # (a change its evidence held, a further
                # change that nothing holds on top of it or not, is no wave of the job's)
                self._t.add_wave(hist[-1][1], self._ep.peak, lasted)  # it came back by itself
            if self._restored_open:  # (its tail is all the history holds of it: no level before)
                self._t.leave_out(hist[0][1] - self.cfg.bucket_s, hist[-1][1])
            self.end_episode()
            self._steps.level = recent
            return True
        if self._further():
            return True
        if self._reread():
            return True
        i = SEVERITIES.index(old.severity)
        if i + 1 < len(SEVERITIES):  # one level up at a time, never down while it lasts
            # A rise needs the higher level over the longer of its window and the warning
            # window: once raised, a severity never comes down, so one noisy 30 s must not
            # make a +5% episode critical for good.
            sev = SEVERITIES[i + 1]
            n = max(self._n[sev], self._n[WARNING])
            shift = self._t.shift(sev, self._ep.ref, n, backed=self._ep.backing is not None) if len(hist) >= n else None
            if shift is not None:
                return self._ep.set(sev, shift)
        # the ratio and summary follow the sustained level (the warning window's median), but
        # never show a figure under the episode's severity: a dip (a trace's steps left out, a
        # pause) shows the episode's peak, so a firing critical alert never reads "+0.5%"
        n = min(len(hist), self._n[WARNING])
        level = median(hist.tail(2, n)) - self._ep.ref
        if self._after_onset(n) < n:
            # (while the window still reaches back before the latest onset, its median is partly
            # the level before it: a live H100 job's further change was raised at +46.8% "since
            # step 19,303" and read +21.9% since that step the next evaluation, its steps still
            # +47%: tests/data/real/diag/h100x; the figure raised stands until the window is past)
            level = max(level, self._ep.raised)
        if level < math.log1p(RAISE[old.severity] * self._t.ratio[old.severity]):
            level = max(level, self._ep.peak)
        if abs(level - math.log(old.ratio)) >= 0.005:
            return self._ep.set(old.severity, level)
        return False

    def _after_onset(self, n: int) -> int:
        """How many of the history's last ``n`` buckets lie after the open episode's latest onset."""
        hist = self._history
        return sum(1 for t in hist.tail(1, min(len(hist), n)) if t > self._ep.onset[1])

    def _raise(self, sev: str, found: Found) -> Optional[bool]:
        """Open an episode of ``sev`` for the shift found (its onset and evidence read here); True
        when ``condition`` changed, False when settled again instead, None when not raised (a
        critical shift spared the sustain whose evidence its own onset does not show)."""
        shift, ref, which = found.shift, found.ref, found.which
        self._ep.peak = 0.0
        n = self._n[sev] + self._n_before[sev] + self._t.outlast  # (the onset lies further back)
        rows = [self._history[k] for k in range(max(0, len(self._history) - n), len(self._history))]
        # (nor is an onset dated inside the episode that ended: a live H200 job's +40%
        # empty_cache() episode ended, and a host's +8% after it was dated at its start and taken
        # for it, tests/data/real/diag/h200zm)
        rows = [r for r in rows if self._t.after_end(r[1])] or rows[-self._n[sev]:]
        if found.since is not None:  # (dated by the source's own change, ShiftTests.led)
            rows = [r for r in rows if r[1] - self.cfg.bucket_s >= found.since - self.cfg.bucket_s / 2] or rows
        ys = [r[2] for r in rows]
        k = estimate_onset(ys, ref, shift, self._t.clip)
        onset_at = rows[k][1] - self.cfg.bucket_s
        window = self._steps.window_at(onset_at, shift)
        if found.slow is not None:  # (a slow change: raised on its evidence since settling)
            return self._ep.open(sev, (int(rows[k][0]), onset_at), ref, shift, None, found.slow, self._settled_at,
                                 slow=True)
        backing, unknown, span = self._t.backing_at(onset_at, ref, shift)
        if window is not None and backing is not None and backing.kind in _NO_WINDOW_MAKES and not backing.host_paced:
            window = None  # (a window's after-effect is the host's cost spread over every phase)
        read_at_steps = backing
        if window is None:  # (the change dated by the source that holds it)
            k, onset_at, backing, unknown, span = self._t.date_by_evidence(rows, k, onset_at, backing, (unknown, span),
                                                                           ref, shift)
        if (found.spared or found.held) and not self._t.holds(backing) and not self._t.holds_redated(read_at_steps, backing):
            return None  # (spared the sustain or z by evidence its own onset does not show: not raised)
        if window is None and self._t.nothing_in(backing, unknown) and not self._t.enough(sev, ref, shift):
            return None  # (nothing holds it: the host's pace needs more, and is no shift to settle again from)
        if (onset_at < self._settled_at - self.cfg.bucket_s and self._resettles < _RESETTLE_MAX
                and window is None and backing is None):  # (stepwatch's own cost, and a change its
            return self._resettle(onset_at, ys[k:])        # evidence holds, are raised wherever they fall)
        return self._ep.open(sev, (int(rows[k][0]), onset_at), ref, shift, window, (backing, unknown, span),
                             self._settled_at if which == "settled" else None)

    def _resettle(self, onset_at: float, since_onset: list) -> bool:
        """A shift found after arming whose onset lies inside the settling time: the job had not
        settled (2 x H200: a host hump of +10% for 90 s from 165 s, armed at 180 s, raised
        critical at 190 s). Not raised: disarmed, and settled again from the onset (its buckets
        so far kept), as a change before arming always is. Returns False (nothing raised). A
        collector restarted meanwhile takes up the first settled level (nothing is saved while
        the rank is not armed)."""
        self._resettles += 1
        self._resettled_from = onset_at
        self._settled = self._settled_at = None
        self._noise.reset()
        self._settle = list(since_onset)
        self._steps.first_time = onset_at - self.cfg.warmup_s  # settled again settle_s after the onset
        self._version += 1
        return False

    def _reread(self) -> bool:
        """The open episode's evidence read again at its onset when its phase times could not be
        compared at the raise (too few blocks after the onset), until they can, for
        ``_REREAD_S`` after the onset: the episode then says what decided it, as any other. A
        launch-bound H100 job's busy training thread (+1.1 ms of 12 ms) was raised 16 s after an
        onset its noisy floors dated 36 s late, two 5-s blocks after it: decided by nothing, its
        text saying neither "a change of the job" nor "no one thing", though its forward grew
        (tests/data/real/diag/h100p_1gpu_s_pulses). Not an overhead episode (its text names the
        agent's window, and what makes it the job's is the diagnosis's). True when ``condition``
        changed."""
        ep = self._ep
        if (ep.backing is not None or PHASE_TIMES not in ep.unknown or self._evidence is None or ep.change
                or ep.alertname != THROUGHPUT_DRIFT  # (a further change's read is its own; an overhead
                or self._history[-1][1] - ep.onset[1] > _REREAD_S):  # episode's is the agent's)
            return False
        read = self._t.backing_at(ep.onset[1], ep.ref, ep.raised)
        if PHASE_TIMES in read[1]:
            return False
        return ep.reread(read)

    def _further(self) -> bool:
        """A further change in the open episode (:meth:`ShiftTests.further`): the episode takes
        its onset and the evidence there (:meth:`Episode.further`). One found against the level
        just before it is taken only when a source other than the episode's holds it there. Else
        a change of cause the step does not show (:meth:`ShiftTests.further_by_cause`)."""
        if self._ep.alertname != THROUGHPUT_DRIFT:
            return False
        found = self._t.further(self._ep)
        if found is None:
            cause = self._t.further_by_cause(self._ep)
            if cause is None:
                return False
            step, onset_at, read = cause  # (the step stands where it was: no shift added)
            return self._ep.further(step, onset_at, 0.0, read, True)
        step, onset_at, ref, shift, spared, by_before = found
        read = self._t.backing_at(onset_at, ref, shift)
        if (spared or by_before) and not self._t.holds(read[0]):
            return False  # (spared the sustain by evidence its own onset does not show)
        if by_before and source_of(read[0]) == source_of(self._ep.backing):
            return False  # (the episode's own change, come back from a dip)
        return self._ep.further(step, onset_at, ref + shift - self._ep.ref - self._ep.raised, read, by_before)

