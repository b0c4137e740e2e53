"""ShiftTests: a drift detector's tests of a shift against a reference level, over the buckets
of its history: the size and spread each severity needs (``_shift``'s rules: 0.8x the ratio,
0.7x for info, ``z`` spreads, two thirds of the window above half the shift), the critical
sustain, the job's waves a shift no larger must outlast, the settled level alone for a shift
that nothing holds over a dip of the job's own noise, what such a shift needs (``enough``), and
the rank's evidence, which raises a
warning or critical shift at its ratio when the source that holds it stands ``evidence_z`` of its
own spreads out (a warning-sized one on the critical window already, when a phase's device time
or the loader's wait holds it: :meth:`ShiftTests.early`; a slower loader measured against the
seconds before its wait changed: :meth:`ShiftTests.led`), and which, gone, ends an episode."""

from __future__ import annotations

import collections
import itertools
import math
from typing import TYPE_CHECKING, NamedTuple, Optional, Union

from .._ring import Ring
from ._config import DriftConfig
from ._drift_episode import Episode
from ._drift_noise import RAISE, Noise
from ._evidence import PHASE_TIMES, PHASES
from ._evidence_noise import MIN_RUN
from ._types import CRITICAL, INFO, WARNING, Backing, Kind, median

if TYPE_CHECKING:
    from ._evidence import RankEvidence

__all__ = ["Found", "ShiftTests", "estimate_onset", "MIN_BEFORE_S", "source_of"]

_SUSTAINED_SHARE = 2 / 3  # share of a test window's buckets above half the shift
# A critical shift under this many critical ratios (+15%) must also be sustained over
# critical_sustain critical windows: the real jobs' humps measured +8..14% (h200q_1gpu_m for
# 25 s, h200t_2gpu_m_short for 90 s); a larger change is raised on the critical window alone
_SUSTAIN_BELOW = 1.5
MIN_BEFORE_S = 120.0  # the "level before" reference spans at least this long
_GONE_SHARE = 0.3  # an episode's evidence under this share of its growth at the raise: gone
_WAVES_KEPT = 16  # the job's latest waves (episodes that ended by themselves) remembered
_LEFT_OUT_KEPT = 4  # spans whose buckets stand for no level before (ShiftTests.leave_out) kept
_WAVE_SIZE = 0.8  # a shift under 1/0.8 of a wave's peak must outlast the wave to raise
_WAVE_OUTLAST = 1.5  # ... by this factor of the wave's length
# A further change is at least this share of the shift already raised: the first raise can
# measure a large change short by a few percent (a +49% demo slowdown raised at +41% on the
# warning window's median while its level still rose), which is that change, not another.
_FURTHER_SHARE = 0.5
# ... or one that new evidence holds above the episode's own level just before it, that level the
# median of at least this many buckets inside the episode (ShiftTests.further_from_before)
_INSIDE_MIN = 3
# A backed shift's onset moves to where its source changed when that is more than this many
# buckets after the step times' onset (ShiftTests.date_by_evidence)
_REDATE_BUCKETS = 2
# ... and with no backing at the steps' onset, only where the step rose there by this share of the
# shift: a host-paced pulse's own step between two onsets is small, and a recording's small phase
# movement (+0.6 ms of 40 ms) held half of it (evidence-less pulses taken for the job's: 10 -> 13
# of 88 without this)
_SEARCHED_SHARE = 1 / 3
# A backing of these kinds (the GPU's busy time, the device's work over every phase) names no
# phase: the phases and the loader's wait are searched as with none, and one that changed later
# and holds its step dates the change
_UNSPECIFIC = (Kind.GPU, Kind.DEVICE)
# The loader's wait as a source searched for its own change (date_by_evidence, led)
_WAIT_SOURCE = Backing(Kind.LOADER, "data-loader wait", 0.0, 0.0, "ms", 0.0)
# The sources a change is measured against the seconds before it by (ShiftTests.led) and the
# sources a change of cause inside an open episode is searched in (ShiftTests.further_by_cause):
# the wait, then the compute phases' device time
_LED_SOURCES = (_WAIT_SOURCE,) + tuple(Backing(Kind.PHASE, p, 0.0, 0.0, "ms", 0.0)
                                       for p in ("forward", "backward", "optimizer"))


class Found(NamedTuple):
    """A shift :meth:`ShiftTests.test` found, for the detector to raise."""

    shift: float  # log ratio above ``ref``
    ref: float  # the log level it stands above
    which: str  # "settled", "before" (the level just before the window) or "led" (:meth:`ShiftTests.led`)
    spared: bool  # a critical shift spared the sustain by its evidence (:meth:`ShiftTests.stands_out`)
    since: Optional[float] = None  # "led": the time its source changed (the onset lies after it)
    # under ``z`` of the step's spreads, found because its evidence stood out (:meth:`ShiftTests.shift`'s
    # ``backed``): like a spared shift, raised only if the evidence read at its raise's own onset
    # stands out too (a live H100 job's host +6% over 90 s with a 20-s spike in it: forward stood out
    # at one onset, the raise's own read held only the GPU's busy time; a false warning between two
    # causes, tests/data/real/diag/h100q)
    held: bool = False
    # a slow change (:meth:`ShiftTests.since_settled`): its evidence as read against the settling
    # span ((backing, unknown, span) as :meth:`ShiftTests.backing_at` returns), raised on that read
    slow: Optional[tuple] = None


class ShiftTests:
    """``history``: the detector's buckets ((first step, end time, log summary, quiet) rows);
    ``noise``: its spreads; ``evidence``: the rank's (None: the step times alone). ``n``,
    ``n_before``: buckets per severity's window and its "level before"; ``waves``: (end time,
    peak log shift, seconds from onset to clear) of the episodes that ended by themselves within
    ``transient_s``; ``ended_at``: when the last episode ended (no test window reaches back
    before it); ``outlast``: buckets the last shift tested had to outlast a wave."""

    def __init__(self, cfg: DriftConfig, history: Ring, noise_history_s: float,
                 evidence: Optional["RankEvidence"]):
        self.cfg, self.history, self.evidence = cfg, history, evidence
        b = max(cfg.bucket_s, 1e-6)
        self.n = {sev: max(1, math.ceil(w / b)) for sev, w in
                  ((CRITICAL, cfg.critical_window_s), (WARNING, cfg.warning_window_s), (INFO, cfg.info_window_s))}
        self.n_before = {sev: max(n, math.ceil(MIN_BEFORE_S / b)) for sev, n in self.n.items()}
        self.n_clear = max(1, math.ceil(cfg.clear_s / b))
        self.n_sustain = max(self.n[CRITICAL], math.ceil(cfg.critical_window_s * cfg.critical_sustain / b))
        self.sustain_below = math.log1p(_SUSTAIN_BELOW * cfg.critical_ratio)
        self.ratio = {INFO: cfg.info_ratio, WARNING: cfg.warning_ratio, CRITICAL: cfg.critical_ratio}
        self.clip = math.log(cfg.pause_ratio)
        self.noise = Noise(cfg.z, self.n, max(1, math.ceil(noise_history_s / b)), self.ratio)
        self.ended_at: Optional[float] = None
        self.settled_at: Optional[float] = None  # when the rank settled (its settling span ends there)
        self._settled_wait: Optional[tuple[float, float]] = None  # (settled_at, the loader's wait then, s)
        # (settled_at, RankEvidence.beyond_levels then): the launch-paced phases' device time beyond their host time
        self._settled_beyond: Optional[tuple[float, Optional[tuple]]] = None
        self.outlast = 0
        self.waves: Union[tuple, collections.deque] = ()  # a deque from the first wave on (:meth:`add_wave`)
        self.left_out: Union[tuple, collections.deque] = ()  # ... from the first span on (:meth:`leave_out`)

    def shift(self, sev: str, ref: float, n: int = 0, backed: bool = False) -> Optional[float]:
        """The shift of ``sev``'s window (or of the last ``n`` buckets) above ``ref`` (log
        units) when it raises ``sev``: at least 0.8x its ratio (0.7x for info) and ``z`` noise
        spreads, sustained over two thirds of the window's buckets; else None. ``backed``: a
        warning or critical shift under ``z`` spreads of the step time also raises when its
        evidence holds it and stands ``evidence_z`` spreads of its own source out
        (:meth:`backed`, ``Backing.spreads``): the job changed, whatever the host's pace does to
        the step time (a healthy 40 ms H200 job's forward grew 0.8 ms for minutes, +2.4% of its
        step: info keeps ``z``)."""
        n = n or self.n[sev]
        shift = self._sized(sev, ref, n)
        if shift is None:
            return None
        noise = self.noise.get(sev)
        if shift >= self.cfg.z * noise:
            return shift
        if backed and sev != INFO:  # (info, the long +3%: z, as ever)
            if self.holds(self.backed(ref, shift, n)):
                return shift
        return None

    def _sized(self, sev: str, ref: float, n: int) -> Optional[float]:
        """The shift of the last ``n`` buckets' median above ``ref`` (log units) when it is of
        ``sev``'s size (0.8x its ratio, 0.7x for info) and two thirds of those buckets stand above
        half of it; else None."""
        window = self.history.tail(2, n)
        shift = median(window) - ref
        if shift < math.log1p(RAISE[sev] * self.ratio[sev]) or not _stands(window, ref, shift, n):
            return None
        return shift

    def backed(self, ref: float, shift: float, n: int) -> Optional[Backing]:
        """The evidence of a shift of ``shift`` above ``ref`` over the last ``n`` buckets, at
        its onset estimated as at a raise; None without."""
        if self.evidence is None:
            return None
        return self._read(ref, shift, n)[0]

    def _read(self, ref: float, shift: float, n: int) -> tuple:
        """:meth:`backing_at` the onset of a shift of ``shift`` above ``ref`` over the last ``n``
        buckets, estimated as at a raise."""
        m = n + self.n_before[WARNING] + self.outlast
        rows = self.history.tail(1, min(len(self.history), m))
        ys = self.history.tail(2, min(len(self.history), m))
        k = estimate_onset(ys, ref, shift, self.clip)
        return self.backing_at(rows[k] - self.cfg.bucket_s, ref, shift)

    def holds_nothing(self, ref: float, shift: float, n: int) -> bool:
        """Whether the rank's evidence was compared for the shift (:meth:`backed`; its phase
        times known) and nothing holds it: the host's own pace, as far as the agent measures."""
        return self.evidence is not None and self.nothing_in(*self._read(ref, shift, n)[:2])

    def nothing_in(self, backing: Optional[Backing], unknown: tuple) -> bool:
        """Whether a read of the evidence (:meth:`backing_at`'s backing and what it could not
        compare) says nothing holds the shift, its phase times compared (a rank without evidence
        reads nothing and compares nothing: never)."""
        return self.evidence is not None and backing is None and PHASE_TIMES not in unknown

    def enough(self, sev: str, ref: float, shift: float) -> bool:
        """Whether a shift above ``ref`` that nothing holds (its phase times compared at its onset)
        is what such a shift needs to raise ``sev``: ``sev``'s full ratio (not 0.8x), and two
        thirds of the last two of its windows above half of it. The host's wander looks like the
        job's change on the step times alone; only the evidence tells them apart, so without any
        it must be larger and longer (a healthy 2 x H200 job's floor +8.4% for 76 s: raised
        critical without this, tests/data/real/h200t_2gpu_m_sched_short)."""
        if shift < math.log1p(self.ratio[sev]):
            return False
        m = 2 * self.n[sev]
        return len(self.history) >= m and _stands(self.history.tail(2, m), ref, shift, m)

    def within_noise_under(self, settled: float, before: float) -> bool:
        """Whether the level just before a window (``before``) lies under the settled level by
        less than ``z`` of the warning window's spreads: a dip of the job's own noise, not a level
        it moved to. A shift that nothing holds (:meth:`holds_nothing`) is then judged against the
        settled level alone. A healthy launch-bound H200 job (10 s medians 0.85-1.22x) rose for
        45 s from a level before of 11.5 ms, its settled level 11.8 ms: +16.2% over the dip
        (critical, raised with no evidence, live), +13.6% over the settled level (not sustained:
        quiet; tests/data/real/h200zw_1gpu_s). Where the job's level did fall since it settled (a
        launch-bound job's host 22% faster after it settled), the level before still stands in
        (tests/data/real/diag/h200zp)."""
        return before < settled and settled - before < self.cfg.z * self.noise.get(WARNING)

    def stands_out(self, ref: float, shift: float, n: int) -> bool:
        """Whether the shift's evidence (:meth:`backed`) stands ``evidence_z`` spreads of its own
        source out: the job changed, so a critical shift needs no ``critical_sustain`` (the humps
        that rule keeps quiet held no evidence; a live H200 job's for-loop AdamW, optimizer
        4.9 -> 10.8 ms, stood +9.2% on the critical window 34 s after it began, and its step
        wobbled +0..20% bucket to bucket on that host: raised 85 s after it began without this,
        tests/data/real/diag/h200zo). A shift so spared is raised only if the evidence read at
        its raise's own onset stands out too (:meth:`holds`)."""
        return self.holds(self.backed(ref, shift, n))

    def holds(self, b: Optional[Backing]) -> bool:
        """Whether ``b`` stands ``evidence_z`` spreads of its own source out, or is the allocator's
        calls, whose rule is a count that no wander of the host meets (at least +1 a step and 3x
        their level before: the cache emptied each step, 0 -> 19 calls a step)."""
        if b is None:
            return False
        return b.kind == Kind.ALLOCATOR or (b.spreads is not None and b.spreads >= self.cfg.evidence_z)

    def holds_redated(self, read: Optional[Backing], moved: Optional[Backing]) -> bool:
        """Whether a backing that :meth:`date_by_evidence` moved to its own source's change holds
        as ``read`` at the step times' onset: the same source, standing ``evidence_z`` of its
        spreads there, and too few of its blocks after the change to read its spread anew
        (``moved.spreads`` None), not a spread read there and found short. A live H200 job's
        AdamW for-loop came in bursts: the critical window stood +10.7% 25 s after it began, the
        optimizer's device time 4.9 -> 7.9 ms at 15 of its spreads from the steps' onset, and the
        onset moved to the optimizer's own change 20 s later, where 25 s of blocks give no spread:
        not raised, and the next windows fell back under the raise (tests/data/real/diag/h200zzc)."""
        return (read is not None and moved is not None and moved is not read and moved.spreads is None
                and (moved.kind, moved.name) == (read.kind, read.name) and self.holds(read))

    def backing_at(self, onset_at: float, ref: float, shift: float) -> tuple[Optional[Backing], tuple, Optional[tuple]]:
        """The rank's evidence of a shift of ``shift`` (log) above ``ref`` from ``onset_at``, what
        it could not compare, and the span before (lo, edge, step s) it was read against: that
        span ends two buckets ahead of the onset and is at least ``MIN_BEFORE_S`` long (as long
        as the span after, when that is longer); the span after begins a bucket after it."""
        if self.evidence is None:
            return None, (), None
        now = self.history[-1][1]
        edge = onset_at - 2 * self.cfg.bucket_s
        step_s = math.exp(ref)
        lo = edge - max(MIN_BEFORE_S, now - onset_at)
        backing, unknown = self.evidence.backing(lo, edge, onset_at + self.cfg.bucket_s, now, step_s,
                                                  step_s * math.expm1(shift), self.loud)
        return backing, unknown, (lo, edge, step_s)

    def date_by_evidence(self, rows: list, k: int, onset_at: float, backing: Optional[Backing], read: tuple,
                         ref: float, shift: float) -> tuple:
        """(onset index in ``rows``, onset time, backing, unknown, span): the step times' onset
        ``rows[k]`` moved later to where a source that holds the shift changed
        (:meth:`RankEvidence.change_at`: the backing's own source; or, with no backing or an
        unspecific one (``_UNSPECIFIC``), a phase or the loader wait whose change comes where the
        step rose by ``_SEARCHED_SHARE`` of the shift), when that is more than ``_REDATE_BUCKETS`` buckets after it and that source,
        read from there against the steps' level there, holds the step; else as given. On a
        host that wandered up before the job changed, the step times date the change at the
        wander: a 2 x H200 job's +10% forward change, raised 20 s after it began, was dated
        47-98 s early, its forward diluted to +1.6 ms over the span after on one rank and under
        the share that holds a shift on the other (tests/data/real/h200zb_2gpu_m). When the
        steps between the two onsets stood no lower than after the source's change (a host's wave
        that receded as the job's change came), the backing's source is read there against the
        reference with the whole shift: a launch-bound H100 job's host ran ~10% slower from 212 s
        and receded as its loader grew +10% of the step at 270 s; the raise, held by the loader's
        wait, was dated at 212 s (tests/data/real/h100c_1gpu_s)."""
        kept = (k, onset_at, backing) + read
        if self.evidence is None:
            return kept
        b = self.cfg.bucket_s
        now = self.history[-1][1]
        lo = onset_at - max(MIN_BEFORE_S, now - onset_at)
        searched = ([Backing(Kind.PHASE, p, 0.0, 0.0, "ms", 0.0) for p in PHASES if p != "sync"]
                    + [_WAIT_SOURCE])
        sources = ([backing] if backing is not None else []) + (
            searched if backing is None or backing.kind in _UNSPECIFIC else [])
        ys = [r[2] for r in rows]
        best = None
        for src in sources:
            at = self.evidence.change_at(src, lo, onset_at - b, now)
            if at is None or at <= onset_at + _REDATE_BUCKETS * b:
                continue
            j = next((i for i in range(k, len(rows)) if rows[i][1] - b >= at - b / 2), None)
            if j is None or j == k:
                continue
            # read against the level the steps stood at between the two onsets (the host's wander
            # is not the job's change): the shift the source must hold is the step there
            here = median(ys[k:j]) if j - k >= 2 else ref
            step_up = median(ys[j:]) - here
            if step_up <= 0 and src is backing:  # (the wave receded as the source rose:
                here, step_up = ref, shift            # read against the reference, the whole shift)
            if step_up <= 0 or (src is not backing and step_up < shift * _SEARCHED_SHARE):
                continue  # (searched: the step at the source's change must be a third of the shift)
            moved, unknown, span = self.backing_at(rows[j][1] - b, here, step_up)
            if moved is None or (moved.kind, moved.name) != (src.kind, src.name):
                continue
            if best is None or moved.share > best[2].share:
                best = (j, rows[j][1] - b, moved, unknown, span)
        return kept if best is None else best

    def loud(self) -> list[tuple[float, float]]:
        """The (start, end) data times of the history's buckets inside episodes, runs merged,
        after the span before its first bucket (the warm-up): what the evidence's own spreads
        leave out."""
        if not len(self.history):
            return []
        b = self.cfg.bucket_s
        spans: list = [[0.0, self.history[0][1] - b]]
        for t, quiet in zip(self.history.tail(1, len(self.history)), self.history.tail(3, len(self.history))):
            if quiet:
                continue
            if spans and spans[-1][1] >= t - b:
                spans[-1][1] = t
            else:
                spans.append([t - b, t])
        return [tuple(x) for x in spans]

    def evidence_gone(self, ep: Episode, recent: float, settled: float) -> bool:
        """The open episode's evidence is back under ``_GONE_SHARE`` of what it held at the raise
        over the clear window, and the step level (``recent``) under the shift raised: the job's
        change went away, whatever the level the episode compares against did meanwhile (a healthy
        H200 job's level stood +2..4% over its settled level for minutes: an episode of a +10%
        change that came and went stayed open through the next change, which it hid). What is
        left above the reference then is the host's, judged afresh under the rules for a shift
        with no evidence (asking for the step under half the shift kept pulses on 2-GPU hosts
        that wander open 124-308 s after their end: bench/results/evidence_pulses_gone_step.md).
        The step is read above the higher of the episode's reference and the ``settled`` level:
        an episode raised over the seconds before its change (:meth:`led`, a host that had sped
        up) must not stay open because the host went back to its settled pace. A further change
        that nothing holds (the host's pace on top of the job's change) leaves the evidence the
        episode holds as it was (``Episode.held``): a launch-bound H100 job's tiny ops in
        forward (+2.1 ms) were raised, the host then ran +15% over them for 30 s (a further
        change of no evidence), and the episode, its evidence no longer read, stayed open 161 s
        after the ops ended, while the host stood +2..6% over its settled level
        (tests/data/real/diag/h100p_1gpu_s_pulses)."""
        b, span = ep.held or (None, None)  # (the latest onset's evidence, or the one held through a further change)
        if b is None or span is None or self.evidence is None or recent - max(ep.ref, settled) >= ep.raised:
            return False
        hist = self.history
        now = hist[-1][1]
        since = max(ep.onset[1] + self.cfg.bucket_s, now - self.cfg.clear_s)
        grown = self.evidence.grown(b, span[0], span[1], since, now, span[2])
        return grown is not None and grown < _GONE_SHARE * (b.after - b.before)

    def slow_holds(self, ep: Episode) -> bool:
        """Whether a slow change's episode (:meth:`since_settled`) still holds its evidence over
        the clear window against the settling span, at least ``_GONE_SHARE`` of what it held at
        the raise: the job's change is still there however the host's pace moves the step under
        it (a slow loader raised on a launch-bound host resolved each time the host's 60-s median
        dipped and was raised again: bench/results/since_settled.md). The evidence it was raised
        on is read, not a further change's on top of it (a held-out launch-bound H200 job's
        backward ramp, raised half-way, took a further onset whose level before held most of the
        ramp, and ended while the ramp went on)."""
        if ep.slow is None or self.evidence is None:
            return False
        b, (lo, edge, step_s) = ep.slow
        now = self.history[-1][1]
        grown = self.evidence.grown(b, lo, edge, max(ep.onset[1], now - self.cfg.clear_s), now, step_s)
        return grown is not None and grown >= _GONE_SHARE * (b.after - b.before)

    def test(self, sev: str, settled: float) -> Optional["Found"]:
        """The shift of ``sev``'s window against the settled level, else the level just before
        the window (not for a shift that nothing holds when that level is a dip within the job's
        noise: :meth:`within_noise_under`), else a slower loader against the seconds before its
        wait changed (:meth:`led`), or None."""
        n, nb = self.n[sev], self.n_before[sev]
        hist = self.history
        if len(hist) < n or not self.after_end(hist[-n][1]):
            return None
        refs = [(settled, "settled")]
        before = self.level_before(n, nb)
        if before is not None:
            refs.append((before, "before"))
        for ref, which in refs:  # the settled level first: the job's own long-run level
            shift, early = self.shift(sev, ref, backed=True), False
            if shift is None and sev == WARNING:
                shift = self.early(ref)
                early = shift is not None
            if shift is None:
                continue
            if which == "before" and self.within_noise_under(settled, ref) and self.holds_nothing(ref, shift, n):
                continue  # (the host's pace, over a dip of its own: judged against the settled level alone)
            # (an early shift is spared the warning window by its evidence, already read)
            spared = early or self.unsustained(sev, ref, shift)
            if spared and not early and not self.stands_out(ref, shift, n):
                continue
            if self.outlasts_waves(ref, shift) or self.backed(ref, shift, n) is not None:
                held = not early and shift < self.cfg.z * self.noise.get(sev)
                return Found(shift, ref, which, spared, held=held)  # (a shift its evidence holds is the job's: no wave holds it)
        led = self.led(sev) if sev != INFO else None
        if led is not None:
            return Found(led[0], led[1], "led", False, led[2])
        return self.since_settled(sev, settled)

    def since_settled(self, sev: str, settled: float) -> Optional[Found]:
        """A warning-sized shift above the settled level (its size and two thirds of the window's
        buckets above half of it, as :meth:`shift`) whose evidence, read from the rank's settling
        span to the window, holds it and stands ``evidence_z`` of its source's own spreads out
        (those spreads measured up to the window): a change of the job too slow to show at any
        onset (a ramp: at each onset read, the level before holds most of it), on a host whose
        wander keeps the step under ``z`` spreads. Two sources, each near nothing while healthy:
        the loader's wait (alone, as :meth:`led` reads it, not set against the phases: the data
        phase, which holds it, is paced by it), else the device time beyond the host time of a
        compute phase the launches paced while the rank settled (:meth:`RankEvidence.beyond_since`:
        on a launch-bound job, work added on the device; held-out h200zw's backward ramped over
        30 and 60 minutes, never raised on its wandering device time). Not a phase's device time
        itself: it drifts by itself over minutes further than its spreads over adjacent runs tell
        (a live H200 job's optimizer 5.1 ms while it settled, 6.5 ms 10 minutes later with no
        cause on: raised as a change of the job by its phases, tests/data/real/diag/h200zzb).
        Their levels while the rank settled are kept once read, so a ramp is judged against them
        after the settling span's blocks are gone (30 minutes), and saved with the drift state: a
        rank restored after a collector restart judges against them too (its settling span is
        not in the new blocks)."""
        if sev != WARNING or self.evidence is None or self.settled_at is None:
            return None
        lo, edge = self.settled_at - self.cfg.settle_s, self.settled_at
        if self._settled_wait is None or self._settled_wait[0] != edge:
            # (read at the first test after settling, and kept: the blocks leave after 30 minutes)
            level = self.evidence.wait_level(lo, edge)
            self._settled_wait = None if level is None else (edge, level)
        if self._settled_beyond is None or self._settled_beyond[0] != edge:
            self._settled_beyond = (edge, self.evidence.beyond_levels(lo, edge))
        beyond = self._settled_beyond[1]
        if self._settled_wait is None and beyond is None:
            return None
        n = self.n[sev]
        shift = self._sized(sev, settled, n)
        if shift is None:
            return None
        b = self.cfg.bucket_s
        now = self.history[-1][1]
        since = now - n * b
        if since - edge < MIN_BEFORE_S:
            return None  # (a change this soon after settling is read at its onset, as any)
        step_s = math.exp(settled)
        delta_s = step_s * math.expm1(shift)
        backing = (None if self._settled_wait is None else
                   self.evidence.wait_since(self._settled_wait[1], since, now, step_s, delta_s, self.loud))
        if not self.holds(backing) and beyond is not None:
            backing = self.evidence.beyond_since(beyond, since, now, step_s, delta_s, self.loud)
        if not self.holds(backing):
            return None
        return Found(shift, settled, "settled", False, held=True, slow=(backing, (), (lo, edge, step_s)))

    def led(self, sev: str) -> Optional[tuple[float, float, float]]:
        """(shift, reference, onset time) of a change that its source dates inside ``sev``'s window: the
        source changed there (:meth:`RankEvidence.change_at`), the step since then stands ``sev``'s
        shift above its level over the window before that change, and the source holds that
        shift, ``evidence_z`` of its own spreads out. The sources (``_LED_SOURCES``): the loader's
        wait, then the compute phases' device time (a phase that holds the shift alone, not one
        its host paces). Read only when the window's median stands a warning's raise size above
        the one before it. On a host whose pace moves 10% in minutes, the settled level and the 2
        minutes before can lie at a change's own level while the seconds before it lay 10% under
        it (a live H200 job's loader, its wait 0.4 -> 4.5 ms: +13.5% over the 30 s before it, 0%
        over its settled level, tests/data/real/diag/h200zz; a 2 x H200 job's backward +10% as its
        host came down from a 3.5-minute hump it had settled on, never raised without the phases,
        75 s after it began with them: tests/data/real/h200za_2gpu_m_sched_short,
        bench/results/detection_real_led_phases.md)."""
        if self.evidence is None:
            return None
        hist, n = self.history, self.n[sev]
        if len(hist) < 3 * n + 2:
            return None
        ys = hist.tail(2, 3 * n + self.n[CRITICAL])
        if median(ys[-n:]) - median(ys[-2 * n:-n]) < math.log1p(RAISE[WARNING] * self.ratio[WARNING]):
            return None
        times = hist.tail(1, len(ys))
        now = times[-1]
        for source in _LED_SOURCES:
            found = self._led_by(source, sev, ys, times, now)
            if found is not None:
                return found
        return None

    def _led_by(self, source: Backing, sev: str, ys: list, times: list,
                now: float) -> Optional[tuple[float, float, float]]:
        """:meth:`led` by one source: the loader's wait, or a phase's device time (its own, not a
        host that paces it)."""
        b, n = self.cfg.bucket_s, self.n[sev]
        # (neither the source's change nor its level before is read inside the episode that
        # ended: a live H200 job's host ran +7% 15 s after a +5.5% episode of backward GEMMs
        # ended, and the optimizer's device time, 4.9 ms over that episode and 6.5 ms after it,
        # "led" it as a change of the job, tests/data/real/diag/h200zzb)
        start = max(now - MIN_BEFORE_S - 2 * n * b, self.ended_at or 0.0)
        at = self.evidence.change_at(source, start, now - 2 * n * b, now)
        if at is None:
            return None
        j = next((i for i in range(len(times)) if times[i] - b >= at - b / 2), None)
        # (the source's own spread needs MIN_RUN blocks after its change)
        if j is None or j < 2 or len(ys) - j < max(MIN_RUN + 1, n * 2 // 3) or not self.after_end(times[j - 2]):
            return None
        ref = median(ys[max(0, j - n):j])
        after = ys[j:]
        shift = median(after) - ref
        if shift < math.log1p(RAISE[sev] * self.ratio[sev]) or not _stands(after, ref, shift, len(after)):
            return None
        onset_at = times[j] - b
        edge = onset_at - 2 * b
        step_s = math.exp(ref)
        lo, delta = max(edge - max(MIN_BEFORE_S, now - onset_at), start), step_s * math.expm1(shift)
        if source.kind == Kind.LOADER:
            held = self.evidence.wait_backing(lo, edge, onset_at + b, now, step_s, delta, self.loud)
        else:
            held, _ = self.evidence.backing(lo, edge, onset_at + b, now, step_s, delta, self.loud)
            if held is None or (held.kind, held.name) != (source.kind, source.name) or held.host_paced:
                return None
        return (shift, ref, onset_at) if self.holds(held) else None

    def level_before(self, n: int, nb: int) -> Optional[float]:
        """The level just before the last ``n`` buckets: the median of the ``nb`` before them,
        those inside a span left out (:meth:`leave_out`) not counted, when at least half of ``nb``
        are left; else None."""
        hist = self.history
        m = min(len(hist), n + nb)
        ys = hist.tail(2, m)[:-n]
        if self.left_out:
            b = self.cfg.bucket_s
            ys = [y for y, t in zip(ys, hist.tail(1, m)[:-n])
                  if not any(start <= t - b / 2 <= end for start, end in self.left_out)]
        return median(ys) if len(ys) >= nb // 2 else None

    def leave_out(self, start: float, end: float) -> None:
        """The buckets from ``start`` to ``end`` stand for no level before a later window: the
        tail of an episode that a collector restart restored open. The restarted history holds
        none of the level before that episode, only its last buckets and the dip its end may
        leave (a slower loader's end: the loader catching up), which alone would then stand for
        the job's level. The latest _LEFT_OUT_KEPT spans are kept."""
        if not self.left_out:
            self.left_out = collections.deque(maxlen=_LEFT_OUT_KEPT)
        if (start, end) not in self.left_out:
            self.left_out.append((start, end))

    def early(self, ref: float) -> Optional[float]:
        """A warning-sized shift above ``ref`` over the critical window (its size and two thirds
        of its buckets above half of it, as :meth:`shift`) that a phase's device time or the
        loader's wait holds, standing ``evidence_z`` of its own spreads out (:meth:`holds`): the
        job changed, so it needs no warning window (90 s) to be told from the host's pace. Not a
        phase its host paces (a healthy H200 job's forward, host-paced, grew 3.2 ms for half a
        minute: tests/data/real/h200q_1gpu_m), nor the wait in sync (another rank's cost on a
        lockstep job, the straggler rule's: a 2 x H200 job's +2% from one rank's host work stood
        +4.9% on the other's floor, tests/data/real/phases/h200zd). A live H200 job's slower loader,
        +8% on the level before (wait 0.2 -> 6.3 ms), was raised 63 s after it began on the warning
        window, 38 s with this (tests/data/real/diag/h200zt). On the real corpus, held out with
        phase times: +10% within 60 s 43 -> 45 of 47, +5% within 3 min 40 -> 41, +3% within 10 min
        33 -> 36 (the rest: the recording ends first), false episodes the same (bench/results/
        detection_real_early.md); the evidence pulses the same counts, six raised 4-21 s sooner
        (bench/results/evidence_pulses_early.md)."""
        n = self.n[CRITICAL]
        shift = self._sized(WARNING, ref, n)
        if shift is None:
            return None
        b = self.backed(ref, shift, n)
        return shift if self.holds(b) and not b.host_paced and b.name != "sync" else None

    def after_end(self, bucket_end: float) -> bool:
        """Whether the bucket ending at ``bucket_end`` began after the last episode ended (no
        test window and no onset reaches back into it)."""
        return self.ended_at is None or bucket_end - self.cfg.bucket_s >= self.ended_at

    def further(self, ep: Episode) -> Optional[tuple[int, float, float, float, bool, bool]]:
        """A further change in the open episode ``ep``: the critical window's level stands a
        critical shift, else the warning window's a warning shift (:meth:`shift`'s rules and a
        raise's critical sustain), and at least half the shift already raised, above the level
        the episode was raised on: a change during an episode is found on the horizons of a
        fresh raise (a +40% ``empty_cache()`` in an open +8% episode of a live H200 job was
        found 60 s after it began on the warning window alone, tests/data/real/diag/h200zm).
        Else (:meth:`further_from_before`) a shift above the episode's own level just before it
        that new evidence holds. Returns (onset step, onset time, reference, shift, spared as in
        :meth:`test`, by the level before) with the onset found as at a raise among the buckets
        since the current one, or None."""
        hist, top = self.history, ep.ref + ep.raised
        for sev in (CRITICAL, WARNING):
            n = self.n[sev]
            if len(hist) < n:
                continue
            shift = self.shift(sev, top, n, backed=True)
            if shift is None or shift < _FURTHER_SHARE * ep.raised:
                continue
            spared = self.unsustained(sev, top, shift)
            if spared and not self.stands_out(top, shift, n):
                continue
            break
        else:
            return self.further_from_before(ep)
        return self._further_onset(ep, n, top, shift) + (top, shift, spared, False)

    def further_from_before(self, ep: Episode) -> Optional[tuple[int, float, float, float, bool, bool]]:
        """A change of the job inside the open episode that the level the episode was raised on
        hides: the critical window's (else the warning window's) level stands a shift of that
        severity above the episode's own level just before it (the median of at least
        ``_INSIDE_MIN`` buckets, all of them inside the episode), and evidence that stands out
        (:meth:`holds`) holds it. The caller asks that this evidence be a source other than the
        episode's. A live H200 job's host ran +12% for 110 s with no evidence (an episode of its
        own), came back to +5%, and a slower loader then took the step +10% over that with its
        wait 0.2 -> 4 ms: +4% over the level raised, it was never raised
        (tests/data/real/diag/h200zr). A held-out launch-bound H200 job's host episode opened 50 s
        before an optimizer change (its device time 20 of its own spreads out) that stood +6% over
        the episode's level: with half a span (6 buckets) asked, it was never raised; with 3, 61 s
        after it began (tests/data/real/h200u_1gpu_xs played with pulses). Returns as
        :meth:`further` (spared False), or None."""
        hist, b = self.history, self.cfg.bucket_s
        for sev in (CRITICAL, WARNING):
            n, nb = self.n[sev], self.n_before[WARNING]
            rows = hist.tail(1, min(len(hist), n + nb))[:-n]
            inside = [i for i, t in enumerate(rows) if t - b >= ep.onset[1] + b]
            if len(inside) < _INSIDE_MIN:
                continue
            ys = hist.tail(2, min(len(hist), n + nb))[:-n]
            ref = median(ys[inside[0]:])
            shift = self.shift(sev, ref, n, backed=True)
            if shift is None or self.unsustained(sev, ref, shift) or not self.stands_out(ref, shift, n):
                continue
            return self._further_onset(ep, n, ref, shift) + (ref, shift, False, True)
        return None

    def further_by_cause(self, ep: Episode) -> Optional[tuple[int, float, tuple]]:
        """A change of the job inside the open episode ``ep`` that its step time does not show: a
        source of :data:`_LED_SOURCES` other than the one the episode holds (a compute phase only
        when that is not the device's work or the GPU's busy time, which hold every phase) changed
        (:meth:`RankEvidence.change_at`) more than ``_REDATE_BUCKETS`` buckets after the latest
        onset and at least the critical window ago, and, read from there against the step's level
        between the two (at least ``_INSIDE_MIN`` buckets), grew by at least a warning-sized
        shift of that level, not paced by its host, and stands ``evidence_z`` of its own spreads out
        (:meth:`holds`), while the step stands at least that level and half the episode's raised
        shift above its reference: what held the step before receded as the new cause came. A
        launch-bound H200 job's host ran +10% for minutes (an episode its GPU busy time held); as
        the host came back, a slower loader (its wait 0.13 -> 1.2 ms, +10% of the step) took the
        step where it stood, and the loader's change was never shown
        (tests/data/real/h200u_1gpu_xs played with pulses). Cost: 270-580 us a call on a 2-core
        machine (h200x_2gpu_m and h200u_1gpu_xs played with pulses), one call per evaluation of a
        rank whose open episode found no further change of the step (about 2% of a core for
        1,000 ranks in episodes at the 5-s tick). Returns (onset step, onset time,
        :meth:`backing_at`'s read there), or None."""
        hist, b = self.history, self.cfg.bucket_s
        nc = self.n[CRITICAL]
        if self.evidence is None or len(hist) < nc + _INSIDE_MIN:
            return None
        now = hist[-1][1]
        rows = self._since_onset(ep, nc)
        if len(rows) < nc + _INSIDE_MIN:
            return None
        holds = [x for x in (ep.backing, ep.held[0] if ep.held else None) if x is not None]
        held = {source_of(x) for x in holds}
        # (the device's work over every phase, or the GPU's busy time, holds the compute phases:
        # the part of it that grew is the same change; a held-out launch-bound job's +10%
        # backward, raised on the device's work, was taken again as backward's own and split in
        # three episodes, h200zw_1gpu_s played three times)
        whole = any(x.kind in _UNSPECIFIC for x in holds)
        need = math.log1p(RAISE[WARNING] * self.ratio[WARNING])
        ys = [r[2] for r in rows]
        best = None
        for src in _LED_SOURCES:
            if source_of(src) in held or (whole and src.kind == Kind.PHASE):
                continue
            # (where the source's blocks best split, wherever that falls: a split asked to fall
            # after the onset finds the change the episode was raised on again, its level before
            # in the span before)
            at = self.evidence.change_at(src, rows[0][1] - b - MIN_BEFORE_S, -math.inf, now)
            if at is None or at <= ep.onset[1] + _REDATE_BUCKETS * b or now - at < nc * b:
                continue
            j = next((i for i, r in enumerate(rows) if r[1] - b >= at - b / 2), None)
            if j is None or j < _INSIDE_MIN or len(rows) - j < nc:
                continue
            here, after = median(ys[:j]), median(ys[j:])
            if after < here or after - ep.ref < _FURTHER_SHARE * ep.raised:
                continue
            read = self.backing_at(rows[j][1] - b, here, need)
            if (source_of(read[0]) != source_of(src) or read[0].host_paced or read[0].share < 1.0
                    or not self.holds(read[0])):
                # (a phase its host paced: a host's wave gathered in one host-bound phase as the
                # step stood, forward +3.3 ms of a 40 ms H200 job, h200q_1gpu_m; a source grown
                # by less than that shift: a live H200 job's optimizer, +1 ms of 43 ms at 4.6 of
                # its spreads inside its loader's episode, tests/data/real/diag/h200zo)
                continue
            if best is None or read[0].share > best[2][0].share:
                best = (int(rows[j][0]), rows[j][1] - b, read)
        return best

    def _further_onset(self, ep: Episode, n: int, ref: float, shift: float) -> tuple[int, float]:
        """(onset step, onset time) of a further change of ``shift`` above ``ref`` over the last
        ``n`` buckets, found as at a raise among the buckets since the episode's current onset."""
        hist = self.history
        rows = self._since_onset(ep, n) or [hist[k] for k in range(max(0, len(hist) - n), len(hist))]
        k = estimate_onset([r[2] for r in rows], ref, shift, self.clip)
        return int(rows[k][0]), rows[k][1] - self.cfg.bucket_s

    def _since_onset(self, ep: Episode, n: int) -> list:
        """The history's rows among its last ``n`` + the warning's "level before" buckets that lie
        after the open episode's latest onset: where a further change's onset is found."""
        hist = self.history
        m = n + self.n_before[WARNING]
        rows = [hist[k] for k in range(max(0, len(hist) - m), len(hist))]
        return [r for r in rows if r[1] - self.cfg.bucket_s >= ep.onset[1]]

    def unsustained(self, sev: str, ref: float, shift: float) -> bool:
        """Whether ``sev`` is critical with ``shift`` under 1.5x ``critical_ratio`` and not
        :meth:`sustained`: raised only when :meth:`stands_out` spares it."""
        return sev == CRITICAL and shift < self.sustain_below and not self.sustained(ref, shift)

    def sustained(self, ref: float, shift: float) -> bool:
        """Whether a critical shift (under 1.5x ``critical_ratio``) also stands above half its
        size on two thirds of the last ``critical_sustain`` x ``critical_window_s``: a healthy
        40 ms H200 job (tests/data/real/h200q_1gpu_m) rose +8..13% for five 5 s buckets and came
        back, which the critical window alone (30 s) raises; a lasting +10% raises ~30 s after it
        began (the critical window alone: ~20 s)."""
        n = self.n_sustain
        return _stands(self.history.tail(2, min(len(self.history), n)), ref, shift, n)

    def add_wave(self, end: float, peak: float, lasted: float) -> None:
        """An episode that ended by itself (``end`` time, ``peak`` log shift, seconds it
        ``lasted``): the latest _WAVES_KEPT are kept."""
        if not self.waves:
            self.waves = collections.deque(maxlen=_WAVES_KEPT)
        self.waves.append((end, peak, lasted))

    def outlasts_waves(self, ref: float, shift: float) -> bool:
        """False while a shift no larger than one of the job's recent waves (an episode that
        ended by itself within ``transient_s``, in the last ``noise_history_s``) has stood for
        less than 1.5x that wave's length: on a host whose speed wanders +-10% for minutes, a
        change of that size is told from the wandering only by outlasting it."""
        now = self.history[-1][1]
        need = max((lasted for end, peak, lasted in self.waves
                    if now - end <= self.cfg.noise_history_s and shift <= peak / _WAVE_SIZE), default=0.0)
        self.outlast = 0
        if not need:
            return True
        k = self.outlast = math.ceil(_WAVE_OUTLAST * need / self.cfg.bucket_s)
        ys = self.history.tail(2, min(len(self.history), k))
        stood = 0
        for y in reversed(ys):
            if y - ref < shift / 2:
                break
            stood += 1
        return stood >= k


def _stands(ys: list, ref: float, shift: float, n: int) -> bool:
    """Whether two thirds of ``n`` buckets (of which ``ys`` are the last) stand above half of
    ``shift`` over ``ref``: sustained, not one spike."""
    return sum(1 for y in ys if y - ref >= shift / 2) >= _SUSTAINED_SHARE * n


def estimate_onset(ys: list, ref: float, level: float, clip: float) -> int:
    """Index in ``ys`` (log bucket medians) of the maximum-likelihood start of a shift of
    ``level`` above ``ref`` (log units)."""
    if not ys:
        return 0
    half = min(level, clip) / 2
    totals = list(itertools.accumulate([min(y - ref, clip) - half for y in reversed(ys)]))
    return len(ys) - 1 - totals.index(max(totals))


def source_of(b: Optional[Backing]) -> Optional[tuple[str, str]]:
    """What a backing is read from: (its kind, its name), or None without one."""
    return None if b is None else (b.kind, b.name)
