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

**Noise.** The job's own spread at each test window: the robust spread (1.4826 x MAD) of the
medians of every run of that window's length in the quiet history (buckets outside episodes,
the last ``noise_history_s``), around the quiet history's median. Until the history holds
enough of a long window, the spread of the longest window it does hold stands in (a median
over a longer window moves less). A shift must stand ``z`` spreads out to raise; ``reach()``
says, per severity, the smallest sustained shift that can raise now (on the real corpus, read
240 s in, it foretold whether a +10% change was raised critical within 60 s on 20 of 23
recordings: bench/results/detection_reach_real.md).

**Pauses.** A step at least ``pause_ratio`` x the current level is a pause step (evaluation,
checkpoint, stall): counted (a run of one is a "stall", longer runs a "pause") and left out of
every bucket. A run of ``max_pause_steps`` is a level change: its steps are then kept. So is a
run of at least ``min_bucket_steps`` that began under ``pause_ratio`` squared (2.25x) and that one
quicker step ended: a change wobbling around the limit, not a pause.

**Tests.** For each severity, from the highest: over its window (``critical_window_s``,
``warning_window_s``, ``info_window_s``) the median of the buckets against two references —
the settled level ("vs this job's level settled at HH:MM") and the level just before the window (the
median of the preceding ``max(window, 120 s)``, "vs the level before") — must be at least
``0.8 x`` the severity's ratio (``0.7 x`` for info), ``z`` noise spreads, and two thirds of the
window's buckets must stand above half the shift (sustained, not one spike). A critical shift
raised from no episode that is under 1.5x ``critical_ratio`` (+15%) must also stand above half
its size on two thirds of the last ``critical_sustain`` x ``critical_window_s`` (45 s): a
healthy 40 ms H200 job rose +8..13% for 25 s and came back (tests/data/real/h200q_1gpu_m, paged
critical live); a lasting +10% is raised ~31 s after it began (median over the real corpus,
bench/results/agent_ab_h200q.md). The onset is the maximum-likelihood change point of the
buckets since the reference.

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
which the agent itself backs off from (agent/_aftereffect.py). When the diagnosis then finds a
cause no window makes (allocator churn, a longer data-loader wait: ``the_jobs_own``), the episode
becomes throughput drift and says what it was first taken for.

**Episodes.** Severity only rises while the change lasts, one level at a time (each raise is
kept in the episode's history by the alert book). **A further change** inside an episode (the
warning window's level at least 0.8 x ``warning_ratio``, ``z`` spreads and half the shift
already raised above the level the episode was raised on, sustained) is never folded in
silently: the episode takes the new onset (``Condition.change`` counts them), its summary names where the episode began, and the alert
book keeps what was raised before (``Alert.earlier``), so the diagnosis is made again for the
new onset. The ratio and summary follow the sustained level (the
median of the last ``warning_window_s``). The condition clears once the median of the last
``clear_s`` (only buckets after the onset) is back under half of ``info_ratio`` and under 40% of
the shift it was raised on. O(1)
per step amortised; the noise spreads are recomputed once a minute (a few hundred sorts of
short lists). Not thread-safe: one caller at a time.
"""

from __future__ import annotations

import bisect
import collections
import datetime
import itertools
import math
from typing import TYPE_CHECKING, Optional

from .._ring import Ring
from ._config import DriftConfig
from ._names import PROFILER_OVERHEAD, THROUGHPUT_DRIFT
from ._types import CRITICAL, INFO, SEVERITIES, WARNING, Backing, Condition, finite_positive, median

if TYPE_CHECKING:
    from ._evidence import RankEvidence

__all__ = ["DriftDetector"]

_SIGMA_FLOOR = 0.002  # log units (0.2%): keeps z finite on perfectly steady series
# A measured level this close to a severity's ratio raises it: the settled level itself sits
# anywhere in the job's early noise (a real 44 ms H100 job: its first 4 minutes 0.2-2% above
# its later level), so an exact +5% can measure +4.5%. Info, the lowest level, at 0.7.
_RAISE = {INFO: 0.7, WARNING: 0.8, CRITICAL: 0.8}
_SUSTAINED_SHARE = 2 / 3  # share of a test window's buckets above half the shift
# A critical shift under this many critical ratios (+15%) must also be sustained over
# critical_sustain critical windows: the real jobs' humps measured +8..14% (h200q_1gpu_m for
# 25 s, h200t_2gpu_m_short for 90 s); a larger change is raised on the critical window alone
_SUSTAIN_BELOW = 1.5
_MIN_BEFORE_S = 120.0  # the "level before" reference spans at least this long
_NOISE_EVERY = 12  # buckets between recomputations of the noise spreads
# A further change is at least this share of the shift already raised: the first raise can
# measure a large change short by a few percent (a +49% demo slowdown raised at +41% on the
# warning window's median while its level still rose), which is that change, not another.
_FURTHER_SHARE = 0.5
# A shift raised after arming with its onset inside the settling time settles the rank again,
# at most this many times (then it is raised: a job whose level never holds is still judged)
_RESETTLE_MAX = 2
_GONE_SHARE = 0.3  # an episode's evidence under this share of its growth at the raise: gone
_WAVES_KEPT = 16  # the job's latest waves (episodes that ended by themselves) remembered
_WAVE_SIZE = 0.8  # a shift under 1/0.8 of a wave's peak must outlast the wave to raise
_WAVE_OUTLAST = 1.5  # ... by this factor of the wave's length
_NOISE_SAMPLES = 6  # runs of a window the quiet history must hold for its own spread
_MAX_BUCKETS = 4096  # history kept (5 s buckets: 5.7 h)
# An episode clears once the level is back under this share of the shift it was raised on (and
# under half of info_ratio): a real +3% hovering at +2.1% against the settled level must not clear
_CLEAR_SHARE = 0.4
# Kept steps compared just before and just after a profiler window's end: few, so a change of
# the job's own a few steps away from a window (windows every 32 steps in a CPU test) shows no
# jump there ...
_AROUND_STEPS = 10
# ... and the jump must also hold over this many kept steps either side: the first steps after a
# window are slow by themselves, and a host that slowed by degrees (2 x H200, 19 ms steps, +3%
# from 225 s and +8% from 300 s) had a window end within a bucket of its onset whose first 10
# steps stood +5% above the 10 before it, its next 50 no higher than the 50 before
_AROUND_HOLD = 50


def _clock(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%H:%M UTC")


def _before(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:.0f} h before the onset"
    return f"{max(1, round(seconds / 60))} min before the onset"


class DriftDetector:
    """``feed`` / ``feed_many`` return True when ``condition`` (None or an active Condition)
    changed. ``pauses`` counts pause episodes by kind ("stall", "pause"); ``armed`` says
    whether the settled level is known; ``baseline_s`` is the current level in seconds."""

    def __init__(self, cfg: DriftConfig, job: str, rank: int, quantile: float = 0.5,
                 evidence: Optional["RankEvidence"] = None):
        self.cfg, self.job, self.rank = cfg, job, rank
        # the rank's evidence (_evidence.RankEvidence), None to judge the steps alone
        self._evidence = evidence if cfg.evidence else None
        # an episode ended by its evidence going away (data time): no test window reaches back
        # before it (its longer windows still hold the change that went away)
        self._gone_at: Optional[float] = None
        self._backing: Optional[Backing] = None  # the open episode's evidence at its latest onset
        self._unknown = ""  # what the evidence could not compare there
        self._backing_span: Optional[tuple] = None  # (lo, edge, step s) the open episode's evidence was read against
        self.quantile = quantile  # each bucket's steps summarised by this quantile (0.5: median)
        b = max(cfg.bucket_s, 1e-6)
        self._n = {sev: max(1, math.ceil(w / b)) for sev, w in
                   ((CRITICAL, cfg.critical_window_s), (WARNING, cfg.warning_window_s),
                    (INFO, cfg.info_window_s))}
        self._n_before = {sev: max(n, math.ceil(_MIN_BEFORE_S / b)) for sev, n in self._n.items()}
        self._n_clear = max(1, math.ceil(cfg.clear_s / b))
        self._n_sustain = max(self._n[CRITICAL], math.ceil(cfg.critical_window_s * cfg.critical_sustain / b))
        self._sustain_below = math.log1p(_SUSTAIN_BELOW * cfg.critical_ratio)
        self._n_noise = max(1, math.ceil(cfg.noise_history_s / b))
        self._ratio = {INFO: cfg.info_ratio, WARNING: cfg.warning_ratio, CRITICAL: cfg.critical_ratio}
        self._clip = math.log(cfg.pause_ratio)
        # (first step, end time, log bucket median, quiet 1/0) of every bucket since settling
        self._history = Ring("Qddd", _MAX_BUCKETS)
        self._bucket: list[float] = []
        self._bucket_start: Optional[tuple[int, float]] = None
        self._first_time: Optional[float] = None
        self._settle: list[float] = []
        self._settled: Optional[float] = None  # log seconds
        self._settled_at: Optional[float] = None
        self._level: Optional[float] = None  # log seconds: the current level (pause reference)
        self._noise: dict[str, float] = {}
        self._reach: Optional[dict[str, float]] = None  # reach() for the spreads in _noise
        self._since_noise = 0
        self._held: list[tuple[int, float, float]] = []
        self._level_moved = False
        self._ref: Optional[float] = None
        self._ref_text = ""
        self._raised = 0.0  # log shift the episode was raised on
        self._alertname, self._window_note = THROUGHPUT_DRIFT, ""
        self._window_step: Optional[int] = None  # the profiler window an overhead episode names
        self._backoff: Optional[tuple[float, str]] = None  # the agent's last back-off (time, message)
        self._onset: Optional[tuple[int, float]] = None
        self._change = 0  # further changes in the open episode
        self._peak = 0.0  # largest log shift measured in the open episode
        self._outlast = 0  # buckets the shift being raised had to outlast a wave
        # (end time, peak log shift, seconds from onset to clear) of episodes that ended by
        # themselves within transient_s: the job's own waves
        self._waves: collections.deque = collections.deque(maxlen=_WAVES_KEPT)
        self._began: Optional[tuple[int, float]] = None  # (onset step, raised ratio) of the episode's start
        self._resettles = 0  # times a shift with its onset in the settling time disarmed the rank
        self._resettled_from: Optional[float] = None  # that shift's onset (Unix time), the latest
        # The agent's own cost: kept steps just before each profiler window's end and just after
        # it, [window end step, end time, (median of the last _AROUND_STEPS, of the last
        # _AROUND_HOLD) before, steps after]
        self._recent_values: collections.deque = collections.deque(maxlen=_AROUND_HOLD)
        self._windows: collections.deque = collections.deque(maxlen=8)
        self.pauses: dict[str, int] = {}
        self.condition: Optional[Condition] = None
        self.baseline_s: Optional[float] = None
        self._version = 0

    def note_window(self, step: int, time: float) -> None:
        """A profiler window of the agent's ended at ``step`` (its last profiled step, Unix
        ``time``): a shift that starts there is the agent's after-effect, not the job's."""
        recent = list(self._recent_values)
        before = (median(recent[-_AROUND_STEPS:]), median(recent)) if len(recent) >= 5 else None
        self._windows.append([step, time, before, []])

    def _after_window(self, values: list) -> None:
        for w in self._windows:
            if len(w[3]) < _AROUND_HOLD:
                w[3].extend(values[:_AROUND_HOLD - len(w[3])])

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
        if self._settled is not None or self._first_time is None:
            return None
        return self._first_time + self.cfg.warmup_s + self.cfg.settle_s

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
        return self._reach if self._settled is not None else None

    def _measure_reach(self) -> None:
        """Keep :meth:`reach` for the spreads just measured (a scrape of 10,000 ranks then
        reads a kept dict per rank instead of computing it)."""
        self._reach = {sev: math.expm1(max(math.log1p(_RAISE[sev] * self._ratio[sev]),
                                           self.cfg.z * self._noise.get(sev, _SIGMA_FLOOR)))
                       for sev in (CRITICAL, WARNING, INFO)}

    def end_episode(self) -> None:
        """The open episode, if any, ends: its level came back, or the job ended (every rank
        disconnected)."""
        if self.condition is not None:
            self.condition, self._onset, self._ref = None, None, None
            self._change, self._began = 0, None
            self._backing, self._unknown, self._backing_span = None, "", None
            self._version += 1

    @property
    def version(self) -> int:
        """Changes whenever :meth:`state` would: arming, a new noise measurement, an episode."""
        return self._version

    def settled(self) -> Optional[tuple]:
        """(settled seconds per step, log spread of ``warning_window_s`` medians) once armed,
        else None: the run's level that the job's later runs are compared with."""
        if self._settled is None:
            return None
        return math.exp(self._settled), self._noise.get(WARNING, self._noise.get(CRITICAL, 0.0))

    def state(self) -> Optional[dict]:
        """What survives a collector restart (``_persist.DriftStore``): the settled level, the
        noise spreads and an open episode; None before the rank is armed."""
        if self._settled is None:
            return None
        out = {"v": 1, "settled": self._settled, "settled_at": self._settled_at,
               "noise": dict(self._noise), "pauses": dict(self.pauses)}
        c = self.condition
        if c is not None:
            out["episode"] = {"alertname": c.alertname, "severity": c.severity, "ref": self._ref,
                              "ref_text": self._ref_text, "onset": list(self._onset), "raised": self._raised,
                              "note": self._window_note, "window": self._window_step,
                              "ratio": c.ratio, "change": self._change,
                              "began": list(self._began) if self._began else None}
        return out

    def restore(self, state: dict) -> None:
        """Take up ``state`` (from :meth:`state`): armed at once against the saved settled level
        (no warm-up or settling again), an open episode goes on from its saved onset. The
        bucket history starts empty: the tests judge once their windows hold new buckets."""
        try:
            settled, at = float(state["settled"]), float(state["settled_at"])
            noise = {k: float(v) for k, v in state.get("noise", {}).items() if k in self._n}
        except (KeyError, TypeError, ValueError):
            return
        if not (math.isfinite(settled) and math.isfinite(at)):
            return
        self._settled, self._settled_at, self._noise = settled, at, noise
        self._measure_reach()
        self._level, self.baseline_s = settled, math.exp(settled)
        self._first_time = at - self.cfg.warmup_s - self.cfg.settle_s
        self.pauses.update({str(k): int(v) for k, v in state.get("pauses", {}).items()})
        ep = state.get("episode")
        if isinstance(ep, dict) and ep.get("severity") in SEVERITIES:
            try:
                self._ref, self._raised = float(ep["ref"]), float(ep["raised"])
                self._onset = (int(ep["onset"][0]), float(ep["onset"][1]))
                self._ref_text, self._window_note = str(ep["ref_text"]), str(ep.get("note", ""))
                self._window_step = int(ep["window"]) if ep.get("window") is not None else None
                self._alertname = str(ep.get("alertname", THROUGHPUT_DRIFT))
                self._change = int(ep.get("change", 0))
                began = ep.get("began")
                self._began = (int(began[0]), float(began[1])) if began else None
                self._set(ep["severity"], math.log(float(ep["ratio"])))
            except (KeyError, TypeError, ValueError, IndexError):
                self.condition = None

    # -- steps ----------------------------------------------------------------------------------
    def feed(self, step: int, time: float, value: float) -> bool:
        if not finite_positive(value):
            return False
        if self._first_time is None:
            self._first_time = time
        moderate = self._level_moved or (bool(self._held) and self._level is not None and
                                         math.log(self._held[0][2]) - self._level < 2 * self._clip)
        limit = self._clip / 2 if moderate else self._clip
        outlier = self._level is not None and math.log(value) - self._level >= limit
        if not outlier:
            self._level_moved = False
            if moderate and len(self._held) >= self.cfg.min_bucket_steps:
                # a run of moderately slower steps that one quicker step broke is a change
                # wobbling around the pause limit (an H200 job 11 -> 16 ms: its first 81 steps
                # were dropped as a "pause" and the onset dated 82 steps late), not a pause: kept
                changed = self._keep_held()
                return self._add(step, time, value) or changed
            self._end_pause()
        elif not self._level_moved:
            self._held.append((step, time, value))
            if len(self._held) < self.cfg.max_pause_steps:
                return False
            self._level_moved = True  # no pause lasts this long: the level moved
            return self._keep_held()
        return self._add(step, time, value)

    def _keep_held(self) -> bool:
        """The held run's steps into the buckets after all (a level change, not a pause)."""
        held, self._held = self._held, []
        return any([self._add(*h) for h in held])

    def feed_many(self, step: list, end_time_s: list, duration_s: list) -> bool:
        """:meth:`feed` for each (a batch, as columns); True when ``condition`` changed. A run
        of plain steps (finite, under the pause limit, no pause held, inside one bucket) goes
        into the bucket at once; anything else takes the step-by-step path."""
        changed, n = False, len(duration_s)
        if not n:
            return False
        if self._first_time is None:
            self._first_time = end_time_s[0]
        start = self._bucket_start[1] if self._bucket_start else end_time_s[0]
        limit = start + self.cfg.bucket_s  # steps ending before this cannot close the bucket
        j = bisect.bisect_left(end_time_s, limit)  # (times arrive in order; a clock step only ends a bucket late)
        if j:
            part = duration_s[:j]
            low, high, total = min(part), max(part), sum(part)
            if not (self._held or self._level_moved or not low > 0 or not math.isfinite(total)
                    or (self._level is not None and math.log(high) - self._level >= self._clip / 2)):
                if self._bucket_start is None:
                    self._bucket_start = (step[0], end_time_s[0])
                self._bucket.extend(part)
                self._recent_values.extend(part)
                if self._windows:
                    self._after_window(part)
            else:
                j = 0
        for k in range(j, n):
            changed |= self.feed(step[k], end_time_s[k], duration_s[k])
        return changed

    def _end_pause(self) -> None:
        if self._held:
            kind = "stall" if len(self._held) == 1 else "pause"
            self.pauses[kind] = self.pauses.get(kind, 0) + 1
            self._held = []

    def _add(self, step: int, time: float, value: float) -> bool:
        if self._bucket_start is None:
            self._bucket_start = (step, time)
        self._bucket.append(value)
        self._recent_values.append(value)
        if self._windows:
            self._after_window([value])
        if time - self._bucket_start[1] < self.cfg.bucket_s or len(self._bucket) < self.cfg.min_bucket_steps:
            return False
        y, first = math.log(self._summary(self._bucket)), self._bucket_start[0]
        self._bucket, self._bucket_start = [], None
        return self._on_bucket(first, time, y)

    def _summary(self, values: list) -> float:
        q = self.quantile
        if q == 0.5:
            return median(values)
        s = sorted(values)
        x = q * (len(s) - 1)
        i = int(x)
        return s[i] if i + 1 >= len(s) else s[i] + (x - i) * (s[i + 1] - s[i])

    # -- buckets --------------------------------------------------------------------------------
    def _on_bucket(self, step: int, time: float, y: float) -> bool:
        cfg = self.cfg
        if time - self._first_time < cfg.warmup_s:
            self._level = y if self._level is None else self._level  # pauses need a level early
            return False
        if self._settled is None:
            self._settle.append(y)
            self._level = median(self._settle)
            self.baseline_s = math.exp(self._level)
            self._history.append(step, time, y, 1.0)
            if time - self._first_time >= cfg.warmup_s + cfg.settle_s and len(self._settle) >= 3:
                self._settled, self._settled_at = self._level, time
                self._update_noise()
            return False
        self._history.append(step, time, y, 0.0 if self.condition is not None else 1.0)
        self._since_noise += 1
        if self._since_noise >= _NOISE_EVERY and self.condition is None:
            self._update_noise()
        return self._judge()

    def _update_noise(self) -> None:
        """Each test window's spread: the robust spread of the difference between the medians
        of two adjacent runs of that length, divided by sqrt(2), over the quiet history (the
        last ``noise_history_s`` but the newest ``info_window_s``, so a fresh shift can raise
        before it widens the spread) and over the same span with the newest included, the
        smaller taken: a hump in the settling time, which the lagged history holds for its
        first minutes, set the spreads for 5-8 minutes alone (a held-out H200 job:
        critical spread 2.74% at arming, 1.41% from the whole history). Differences, not
        deviations from a centre: a slow ramp inside the history would otherwise widen the
        spread it is judged by; the median of the differences moves little for one step
        inside the span. Backtest on every real recording (bench/results/
        detection_real_noise_recent.md): held out +3% 17 -> 23, +5% 19 -> 27, +10% 30 -> 37 of 51
        raised in time, no false episode added."""
        self._version += 1
        self._since_noise = 0
        hist, lag = self._history, (self._n[INFO] if self._noise else 0)
        n_hist = min(len(hist), self._n_noise + lag)
        rows = list(zip(hist.tail(2, n_hist), hist.tail(3, n_hist)))
        ys = [y for y, quiet in rows[:max(0, n_hist - lag)] if quiet]
        # ... and over as long a span with the newest included: the smaller spread is taken (one
        # fresh step moves the median of the differences little; a hump in the settling time,
        # which the lagged history alone holds for minutes, is diluted sooner)
        ys_all = [y for y, quiet in rows[max(0, n_hist - self._n_noise):] if quiet] if lag else []
        spread = None
        for sev in (CRITICAL, WARNING, INFO):  # shortest first: it stands in for longer ones
            n = self._n[sev]
            lagged = self._spread(ys, n)
            own = [v for v in (lagged, self._spread(ys_all, n)) if v is not None]
            if lagged is None and sev in self._noise and own:
                own.append(self._noise[sev])  # the lagged history cannot measure it yet
            if own:
                spread = self._noise[sev] = min(own)
            elif spread is not None and sev not in self._noise:
                # Provisional, until the history holds enough of this window: a shorter run's
                # spread scaled as for independent buckets, doubled (real series wobble: the
                # medians of longer runs shrink more slowly than that).
                self._noise[sev] = max(2 * spread * math.sqrt(self._n[CRITICAL] / n), _SIGMA_FLOOR)
        if not self._noise and len(ys) >= 3:
            center = median(ys)
            self._noise[CRITICAL] = max(1.4826 * median([abs(y - center) for y in ys]), _SIGMA_FLOOR)
        if self._noise:
            last = self._noise.setdefault(CRITICAL, _SIGMA_FLOOR)
            for sev in (WARNING, INFO):  # a longer window's spread never exceeds a shorter one's
                last = self._noise[sev] = min(self._noise.get(sev, last), last)
        self._measure_reach()

    @staticmethod
    def _spread(ys: list, n: int) -> Optional[float]:
        """The robust spread of the difference between the medians of adjacent runs of ``n``
        buckets in ``ys``, divided by sqrt(2); None when ``ys`` holds too few runs."""
        if len(ys) < 2 * n + _NOISE_SAMPLES:
            return None
        stride = max(1, n // 4)
        meds = [median(ys[i:i + n]) for i in range(0, len(ys) - n + 1, stride)]
        gap = max(1, n // stride)
        diffs = [abs(b - a) for a, b in zip(meds, meds[gap:])]
        return max(1.4826 * median(diffs) / math.sqrt(2), _SIGMA_FLOOR)

    # -- judging --------------------------------------------------------------------------------
    def _shift(self, sev: str, ref: float, n: int = 0, backed: bool = False) -> Optional[float]:
        """The shift of ``sev``'s window (or of the last ``n`` buckets) above ``ref`` (log
        units) when it raises ``sev``: at least 0.8x its ratio (0.7x for info) and ``z`` noise
        spreads, sustained over two thirds of the window's buckets; else None. ``backed``: a
        warning or critical shift under ``z`` but at least ``evidence_z`` spreads also raises
        when its evidence holds it (:meth:`_backed`; a healthy 40 ms H200 job's forward grew
        0.8 ms for minutes, +2.4% of its step: info keeps ``z``)."""
        n = n or self._n[sev]
        window = self._history.tail(2, n)
        shift = median(window) - ref
        if shift < math.log1p(_RAISE[sev] * self._ratio[sev]) or not _stands(window, ref, shift, n):
            return None
        noise = self._noise.get(sev, _SIGMA_FLOOR)
        if shift >= self.cfg.z * noise:
            return shift
        if (backed and sev != INFO and shift >= self.cfg.evidence_z * noise
                and self._backed(ref, shift, n) is not None):  # (info, the long +3%: z, as ever)
            return shift
        return None

    def _backed(self, ref: float, shift: float, n: int) -> Optional[Backing]:
        """The evidence of a shift of ``shift`` above ``ref`` over the last ``n`` buckets, at
        its onset estimated as at a raise; None without."""
        if self._evidence is None:
            return None
        m = n + self._n_before[WARNING] + self._outlast
        rows = self._history.tail(1, min(len(self._history), m))
        ys = self._history.tail(2, min(len(self._history), m))
        k = _estimate_onset(ys, ref, shift, self._clip)
        return self._backing_at(rows[k] - self.cfg.bucket_s, ref, shift)[0]

    def _backing_at(self, onset_at: float, ref: float, shift: float) -> tuple[Optional[Backing], str, Optional[tuple]]:
        """The rank's evidence of a shift of ``shift`` (log) above ``ref`` from ``onset_at``, what
        it could not compare, and the span before (lo, edge, step s) it was read against: that
        span ends two buckets ahead of the onset and is at least ``_MIN_BEFORE_S`` long (as long
        as the span after, when that is longer); the span after begins a bucket after it."""
        if self._evidence is None:
            return None, "", None
        now = self._history[-1][1]
        edge = onset_at - 2 * self.cfg.bucket_s
        step_s = math.exp(ref)
        lo = edge - max(_MIN_BEFORE_S, now - onset_at)
        backing, unknown = self._evidence.backing(lo, edge, onset_at + self.cfg.bucket_s, now, step_s,
                                                  step_s * math.expm1(shift))
        return backing, unknown, (lo, edge, step_s)

    def _evidence_gone(self, recent: float) -> bool:
        """The open episode's evidence is back under ``_GONE_SHARE`` of what it held at the raise
        over the clear window, and the step level (``recent``) under half the shift raised: the
        job's change went away, whatever the level the episode compares against did meanwhile (a
        healthy H200 job's level stood +2..4% over its settled level for minutes: an episode of a
        +10% change that came and went stayed open through the next change, which it hid)."""
        b, span = self._backing, self._backing_span
        if b is None or span is None or self._evidence is None or recent - self._ref >= self._raised / 2:
            return False
        hist = self._history
        now = hist[-1][1]
        since = max(self._onset[1] + self.cfg.bucket_s, now - self.cfg.clear_s)
        grown = self._evidence.grown(b, span[0], span[1], since, now, span[2])
        return grown is not None and grown < _GONE_SHARE * (b.after - b.before)

    def _test(self, sev: str) -> Optional[tuple[float, float, str]]:
        """(shift, reference, which) for ``sev`` over its window against the settled level, else
        the level just before the window, or None."""
        n, nb = self._n[sev], self._n_before[sev]
        hist = self._history
        if len(hist) < n or (self._gone_at is not None and hist[-n][1] - self.cfg.bucket_s < self._gone_at):
            return None
        refs = [(self._settled, "settled")]
        if len(hist) >= n + nb // 2:
            refs.append((median(hist.tail(2, min(len(hist), n + nb))[:-n]), "before"))
        for ref, which in refs:  # the settled level first: the job's own long-run level
            shift = self._shift(sev, ref, backed=True)
            if shift is None or (sev == CRITICAL and shift < self._sustain_below
                                 and not self._sustained(ref, shift)):
                continue
            if self._outlasts_waves(ref, shift) or self._backed(ref, shift, n) is not None:
                return shift, ref, which  # (a shift its evidence holds is the job's: no wave holds it)
        return None

    def _sustained(self, ref: float, shift: float) -> bool:
        """Whether a critical shift (under 1.5x ``critical_ratio``) also stands above half its
        size on two thirds of the last ``critical_sustain`` x ``critical_window_s``: a healthy
        40 ms H200 job (tests/data/real/h200q_1gpu_m) rose +8..13% for five 5 s buckets and came
        back, which the critical window alone (30 s) raises; a lasting +10% raises ~30 s after it
        began (the critical window alone: ~20 s)."""
        n = self._n_sustain
        return _stands(self._history.tail(2, min(len(self._history), n)), ref, shift, n)

    def _outlasts_waves(self, ref: float, shift: float) -> bool:
        """False while a shift no larger than one of the job's recent waves (an episode that
        ended by itself within ``transient_s``, in the last ``noise_history_s``) has stood for
        less than 1.5x that wave's length: on a host whose speed wanders +-10% for minutes, a
        change of that size is told from the wandering only by outlasting it."""
        now = self._history[-1][1]
        need = max((lasted for end, peak, lasted in self._waves
                    if now - end <= self.cfg.noise_history_s and shift <= peak / _WAVE_SIZE), default=0.0)
        self._outlast = 0
        if not need:
            return True
        k = self._outlast = math.ceil(_WAVE_OUTLAST * need / self.cfg.bucket_s)
        ys = self._history.tail(2, min(len(self._history), k))
        stood = 0
        for y in reversed(ys):
            if y - ref < shift / 2:
                break
            stood += 1
        return stood >= k

    def _judge(self) -> bool:
        old = self.condition
        if old is None:
            for sev in (CRITICAL, WARNING, INFO):
                found = self._test(sev)  # (a shift under z spreads that its evidence holds raises too)
                if found is not None:
                    return self._raise(sev, *found)
            self._level = median(self._history.tail(2, min(len(self._history), self._n[CRITICAL])))
            self.baseline_s = math.exp(self._level)
            return False
        hist = self._history
        # the clear window never reaches back before the onset: just after a raise it would
        # hold mostly the old level (a critical raise holds 30 s, the clear window is 60 s)
        since = sum(1 for t in hist.tail(1, min(len(hist), self._n_clear)) if t > self._onset[1])
        recent = median(hist.tail(2, max(1, since)))
        gone = recent - self._ref >= min(math.log1p(self.cfg.info_ratio) / 2, _CLEAR_SHARE * self._raised)
        if not gone or self._evidence_gone(recent):
            if gone:
                self._gone_at = hist[-1][1]
            lasted = hist[-1][1] - self._onset[1]
            if (lasted <= self.cfg.transient_s and self._alertname == THROUGHPUT_DRIFT
                    and self._backing is None):  # (a change its evidence held is no wave of the job's)
                self._waves.append((hist[-1][1], self._peak, lasted))  # it came back by itself
            self.end_episode()
            self._level = recent
            return True
        if self._further():
            return True
        i = SEVERITIES.index(old.severity)
        if i + 1 < len(SEVERITIES):  # one level up at a time, never down while it lasts
            # A rise needs the higher level over the longer of its window and the warning
            # window: once raised, a severity never comes down, so one noisy 30 s must not
            # make a +5% episode critical for good.
            sev = SEVERITIES[i + 1]
            n = max(self._n[sev], self._n[WARNING])
            shift = self._shift(sev, self._ref, n, backed=self._backing is not None) if len(hist) >= n else None
            if shift is not None:
                return self._set(sev, shift)
        # the ratio and summary follow the sustained level (the warning window's median), but
        # never show a figure under the episode's severity: a dip (a trace's steps left out, a
        # pause) shows the episode's peak, so a firing critical alert never reads "+0.5%"
        level = median(hist.tail(2, min(len(hist), self._n[WARNING]))) - self._ref
        if level < math.log1p(_RAISE[old.severity] * self._ratio[old.severity]):
            level = max(level, self._peak)
        if abs(level - math.log(old.ratio)) >= 0.005:
            return self._set(old.severity, level)
        return False

    def _raise(self, sev: str, shift: float, ref: float, which: str) -> bool:
        self._peak = 0.0
        n = self._n[sev] + self._n_before[sev] + self._outlast  # (the onset lies further back)
        rows = [self._history[k] for k in range(max(0, len(self._history) - n), len(self._history))]
        ys = [r[2] for r in rows]
        k = _estimate_onset(ys, ref, shift, self._clip)
        onset_at = rows[k][1] - self.cfg.bucket_s
        window = self._window_at(onset_at, shift)
        backing, unknown, span = self._backing_at(onset_at, ref, shift)
        if (onset_at < self._settled_at - self.cfg.bucket_s and self._resettles < _RESETTLE_MAX
                and window is None and backing is None):  # (stepwatch's own cost, and a change its
            return self._resettle(onset_at, ys[k:])        # evidence holds, are raised wherever they fall)
        self._backing, self._unknown, self._backing_span = backing, unknown, span
        self._onset = (int(rows[k][0]), onset_at)
        self._ref, self._raised = ref, shift
        self._alertname, self._window_note = THROUGHPUT_DRIFT, ""
        self._window_step = window
        if window is not None:
            self._alertname = PROFILER_OVERHEAD
            self._window_note = (f"; it began when the agent's profiler window ending at step {window:,} "
                                 "closed: stepwatch's own cost, not the job's (the agent backs off)")
        if which == "settled":  # (a time relative to the onset stays true however late it is read)
            before = onset_at - self._settled_at
            self._ref_text = f"vs this job's level settled at {_clock(self._settled_at)}, {_before(before)}"
        else:
            self._ref_text = "vs the level before"
        changed = self._set(sev, shift)
        return self._note_backoff() or changed

    def _resettle(self, onset_at: float, since_onset: list) -> bool:
        """A shift found after arming whose onset lies inside the settling time: the job had not
        settled (2 x H200: a host hump of +10% for 90 s from 165 s, armed at 180 s, raised
        critical at 190 s). Not raised: disarmed, and settled again from the onset (its buckets
        so far kept), as a change before arming always is. Returns False (nothing raised). A
        collector restarted meanwhile takes up the first settled level (nothing is saved while
        the rank is not armed)."""
        self._resettles += 1
        self._resettled_from = onset_at
        self._settled = self._settled_at = self._reach = None
        self._noise = {}
        self._settle = list(since_onset)
        self._first_time = onset_at - self.cfg.warmup_s  # settled again settle_s after the onset
        self._version += 1
        return False

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

    def _further(self) -> bool:
        """A further change in the open episode: the warning window's level stands a warning
        shift (``_shift``'s rules), and at least half the shift already raised, above the level
        the episode was raised on. The episode takes the new onset, found as at a raise among
        the buckets since the current one."""
        n = self._n[WARNING]
        top = self._ref + self._raised
        if len(self._history) < n or self._alertname != THROUGHPUT_DRIFT:
            return False
        shift = self._shift(WARNING, top, n, backed=True)
        if shift is None or shift < _FURTHER_SHARE * self._raised:
            return False
        m = n + self._n_before[WARNING]
        rows = [self._history[k] for k in range(max(0, len(self._history) - m), len(self._history))]
        rows = [r for r in rows if r[1] - self.cfg.bucket_s >= self._onset[1]] or rows[-n:]
        k = _estimate_onset([r[2] for r in rows], top, shift, self._clip)
        if self._began is None:
            self._began = (self._onset[0], math.expm1(self._raised))
        self._onset = (int(rows[k][0]), rows[k][1] - self.cfg.bucket_s)
        self._backing, self._unknown, self._backing_span = self._backing_at(self._onset[1], top, shift)
        self._raised += shift
        self._change += 1
        return self._set(self.condition.severity, self._raised)

    def _window_at(self, onset: float, shift: float) -> Optional[int]:
        """The end step of a profiler window near ``onset`` after which the kept steps jumped by
        at least half ``shift`` (log units) at once and held there (the same jump over
        ``_AROUND_HOLD`` steps either side, where that many are known), or None. A change of the
        job's own that lands near a window by chance shows no such jump at the window's end."""
        slack, least = 2 * self.cfg.bucket_s, max(shift / 2, 0.01)
        for step, time, before, after in reversed(self._windows):
            if before and len(after) >= _AROUND_STEPS // 2 and onset - slack <= time <= onset + slack + self.cfg.bucket_s:
                held = len(after) < _AROUND_HOLD // 2 or math.log(median(after) / before[1]) >= least
                if math.log(median(after[:_AROUND_STEPS]) / before[0]) >= least and held:
                    return int(step)
        return None

    def reference_span(self) -> Optional[tuple[float, float]]:
        """The data times the open episode's reference level was learnt over, when that is the
        job's settled level (the settle window after warm-up); None otherwise. A diagnosis of an
        episode raised against it compares with those times: a change that grew in, or was dated
        late on a wandering host, then still has its "before" (a synchronize before
        the optimizer step on an H200, +2-4%: dated 76 s late, the blocks just ahead of the onset
        already held it)."""
        if self.condition is None or self._settled_at is None or self._ref != self._settled:
            return None
        return (self._settled_at - self.cfg.settle_s, self._settled_at)

    def backed_off(self, t: float, message: str) -> bool:
        """The agent's ``window_aftereffect`` event (at ``t``): it found a session's lasting
        after-effect and dropped that kind of session. An open StepwatchProfilerOverhead episode
        says so; when the job then recovers it resolves with that in its summary, and when it
        does not, the summary shows the back-off did not help. An event that comes before the
        episode is raised (the agent's check can end before the collector's window: a slow CPU
        host) is noted when it is, if it came after the episode's onset. True when it changed."""
        self._backoff = (t, message)
        return self._note_backoff()

    def _note_backoff(self) -> bool:
        """Note the agent's last back-off in the open StepwatchProfilerOverhead episode, once,
        if it came after the episode's onset. True when it changed."""
        if (self._backoff is None or self.condition is None or self._alertname != PROFILER_OVERHEAD
                or "backed off" in self._window_note):
            return False
        t, message = self._backoff
        if self._onset is not None and t < self._onset[1] - self.cfg.bucket_s:
            return False  # (an earlier window's)
        what = message.split("; ", 2)[1] if message.count("; ") >= 2 else "it dropped that kind of session"
        self._window_note += f"; the agent backed off at {_clock(t)} ({what[:80]})"
        return self._set(self.condition.severity, math.log(self.condition.ratio))

    def the_jobs_own(self, evidence: str) -> bool:
        """The open episode, raised as the profiler's after-effect, is the job's own
        (``evidence`` says why: a cause no profiler window makes): it becomes throughput drift,
        its summary says what it was first taken for. True when it changed."""
        if self.condition is None or self._alertname != PROFILER_OVERHEAD:
            return False
        window = (f"profiler window ending at step {self._window_step:,}" if self._window_step is not None
                  else "profiler window")  # (a state saved before the step was kept)
        self._alertname = THROUGHPUT_DRIFT
        self._window_note = (f"; first taken for the agent's {window} "
                             f"(it closed as the step time rose), but {evidence[:160]} is the job's own")
        return self._set(self.condition.severity, math.log(self.condition.ratio))

    def _set(self, sev: str, shift_log: float) -> bool:
        shift = math.expm1(shift_log)
        step, since = self._onset
        base_ms = math.exp(self._ref) * 1e3
        further = ""
        if self._began is not None:
            further = (f" (a further change: the episode began at step {self._began[0]:,} at "
                       f"{self._began[1]:+.1%})")
        q = self.quantile
        which = "" if q == 0.5 else f"p{100 * q:.0f} step "
        summary = (f"step time {shift:+.1%} {self._ref_text} ({which}{base_ms:.1f} ms -> "
                   f"{base_ms * (1 + shift):.1f} ms) since step {step:,}{further}{self._window_note}"
                   f"{self._evidence_note()}")
        old = self.condition
        self._version += 1
        self._peak = max(self._peak, shift_log)
        self.condition = Condition(self._alertname, self.job, self.rank, sev, summary,
                                   since, step, self.cfg.for_s, ratio=1 + shift, change=self._change,
                                   evidence=self._backing, decided=self._decided())
        return self.condition != old

    def _decided(self) -> str:
        """How the episode was decided: "job" (its evidence holds it), "steps" (the step times
        alone: no evidence holds it), "" (its evidence could not be compared, or is not asked)."""
        if self._evidence is None:
            return ""
        if self._backing is not None:
            return "job"
        return "" if "phase times" in self._unknown else "steps"

    def _evidence_note(self) -> str:
        d = self._decided()
        if d == "job":
            return f"; a change of the job: {self._backing.text()}"
        if d == "steps":
            return "; nothing the agent measures beside the step time moved with it (the host's own pace?)"
        return ""


def _stands(ys: list, ref: float, shift: float, n: int) -> bool:
    """Whether two thirds of ``n`` buckets (of which ``ys`` are the last) stand above half of
    ``shift`` over ``ref``: sustained, not one spike."""
    return sum(1 for y in ys if y - ref >= shift / 2) >= _SUSTAINED_SHARE * n


def _estimate_onset(ys: list, ref: float, level: float, clip: float) -> int:
    """Index in ``ys`` (log bucket medians) of the maximum-likelihood start of a shift of
    ``level`` above ``ref`` (log units)."""
    if not ys:
        return 0
    half = min(level, clip) / 2
    totals = list(itertools.accumulate([min(y - ref, clip) - half for y in reversed(ys)]))
    return len(ys) - 1 - totals.index(max(totals))
