"""Throughput drift of one rank against its own lagged, robust baseline.

Per step the engine feeds a step time (seconds, normalised to the first token count seen when
tokens are reported). Steps the agent profiled never reach this detector (the engine drops them).

Pauses: once a baseline exists, a step at least ``pause_ratio`` x the baseline is a pause step
(evaluation, checkpoint, a stall, a data-loader burst): it is counted (a run of one is a
"stall", longer runs a "pause") and left out of every block, so pauses never accumulate
change-point evidence. A run starts at ``pause_ratio`` and goes on while steps stay above it
(above its square root when the run began below ``pause_ratio`` squared). A run of ``max_pause_steps`` steps is no pause: the level itself has moved, so
the run's steps (held back until then) and the ones after it count as drift until a step
near the old level comes again.

Every ``block_steps`` kept steps the block median's log joins a lag queue; blocks leave it
into the baseline (median and 1.4826*MAD of the last ``baseline_steps``) only while no drift
is flagged, so a lasting regression does not become the new normal. Two tests raise:

- Against the baseline: a one-sided CUSUM on the log ratio (allowance half the ``info_ratio``
  shift, each block's contribution clipped at ``log(pause_ratio)``) starts a candidate change.
  The onset is the maximum-likelihood change point of a mean shift among the blocks of the run,
  so a pause or a noisy block before the change does not pull it early. It is raised once the
  run has lasted ``min_duration_steps`` and the sustained level (the median of the blocks since
  the onset) is at least 0.9x ``warning_ratio`` above baseline with its lower confidence bound
  (``z_min`` standard errors) above ``info_ratio``: the onset is picked where the shift looks
  largest, so a few noisy blocks alone must not pass. Below warning this test never raises: a
  slow wobble of a job's speed reaches a few percent against a lagged baseline.
- A local step: the median of the last ``info_duration_steps`` of kept blocks (for a jump of
  ``warning_ratio``: the last 2 x ``min_duration_steps``) against the median of the 20 blocks
  before them, at a fixed split, so the jump is measured rather than selected. A jump of 0.8x
  the ratio that also stands ``z_min`` + 0.5 standard errors out (it is tested at every
  block), on two blocks running, with the new level at least a third of ``info_ratio`` above
  baseline, raises. A wobble moves the level little between two windows this close, and a
  change in a wobble's trough (small against the baseline) still jumps. The reference is then the level before the jump (the summary says "vs
  the level before"), which the alert's ratio and its clearing use.

Both tests also need ``min_duration_s`` of steps (at the baseline's step time) since the onset,
and the jump test compares windows at least that long: a machine's speed wobbles over seconds
whatever the step length, so with 8 ms steps 100 steps are no trend.

Severity (info / warning / critical) follows the sustained level with hysteresis: it goes
down a level only below 0.8x that level's threshold, and only after ``clear_steps`` of blocks
in a row said so (up at once). The condition clears once the level of
the last ``min_duration_steps`` has stayed under 0.6x ``info_ratio`` for ``clear_steps``. O(1)
per step amortised (one sort of the baseline per block). Not thread-safe: one caller at a time.
"""

from __future__ import annotations

import collections
import itertools
import math
from typing import Optional

from .._ring import Ring
from ._config import DriftConfig
from ._types import CRITICAL, INFO, SEVERITIES, WARNING, Condition, SortedWindow, finite_positive, median

__all__ = ["DriftDetector"]

_SIGMA_FLOOR = 0.002  # log units (0.2%): keeps z finite on perfectly steady series
_MAX_RUN_BLOCKS = 2000  # blocks of a CUSUM run kept for the onset estimate
_RAISE = 0.9  # an estimate this close to info_ratio raises: a change of exactly info_ratio
# sits at the threshold half the time
_JUMP_RAISE = 0.8  # a local jump this close to the ratio raises (it is measured, not selected)
_BEFORE_BLOCKS = 20  # the local jump test's reference: this many blocks before the last ones
# The jump test runs at every block (a hundred tests per 1,000 steps): it needs this many more
# standard errors than z_min. At z_min alone a stationary series with 4.7% per-step noise and
# a 1.6% wobble raised +3.3% "vs the level before" (a 3.2-sigma jump; Hypothesis found it).
_JUMP_EXTRA_Z = 0.5
_SUSTAINED_BLOCKS = 50  # the sustained level: median of at most this many blocks since onset
_MAX_TIME_BLOCKS = 900  # min_duration_s in blocks is capped here (steps under ~0.6 ms at 5 s)


class DriftDetector:
    """``feed`` returns True when ``condition`` (None or an active Condition) changed.
    ``pauses`` counts pause episodes by kind ("stall", "pause")."""

    def __init__(self, cfg: DriftConfig, job: str, rank: int):
        self.cfg, self.job, self.rank = cfg, job, rank
        b = cfg.block_steps
        self._n = max(1, math.ceil(cfg.min_duration_steps / b))
        self._n_info = max(self._n, math.ceil(cfg.info_duration_steps / b))
        self._clear_blocks = max(1, math.ceil(cfg.clear_steps / b))
        self._lag: collections.deque = collections.deque()
        self._lag_blocks = math.ceil(cfg.baseline_lag_steps / b)
        self._base = SortedWindow(max(1, cfg.baseline_steps // b))
        self._min_base = max(2, math.ceil(cfg.min_baseline_steps / b))
        self._recent: collections.deque = collections.deque(maxlen=self._n)  # log block medians
        self._n_jump_warn = 2 * self._n
        self._n_time = 0  # min_duration_s in blocks at the baseline's step time (0: no baseline)
        self._jump_stride = 1
        self._blocks = 0  # blocks seen (the history ring stops growing at its size)
        self._history = Ring("Qdd", _MAX_RUN_BLOCKS)  # (first step, time, log block median)
        self._block: list[float] = []
        self._block_start: Optional[tuple[int, float]] = None
        self._k = math.log1p(cfg.info_ratio) / 2
        self._clip = math.log(cfg.pause_ratio)
        self._cusum = 0.0
        # (step, time, clipped d, d) of the blocks of the current CUSUM run / episode
        self._run = Ring("Qddd", _MAX_RUN_BLOCKS)
        self._mu: Optional[float] = None
        self._sigma: Optional[float] = _SIGMA_FLOOR  # None: not yet taken for the current baseline
        self._held: list[tuple[int, float, float]] = []  # the current pause run's steps
        self._level_moved = False
        self._quiet = 0
        self._onset: Optional[tuple[int, float]] = None
        self._ref: Optional[float] = None  # log level the active condition is measured against
        self._since: collections.deque = collections.deque(maxlen=_SUSTAINED_BLOCKS)
        self._jump_hits = 0
        self._down = 0  # blocks in a row whose level says a lower severity than the episode's
        self.pauses: dict[str, int] = {}
        self.condition: Optional[Condition] = None
        self.baseline_s: Optional[float] = None

    # -- steps ----------------------------------------------------------------------------------
    def feed(self, step: int, time: float, value: float) -> bool:
        if not finite_positive(value):
            return False
        # A run starts at pause_ratio x baseline and goes on down to its square root, so a
        # level near pause_ratio does not split into many short "pauses".
        # (Only for a run that began moderately: after a big outlier — an evaluation pause, a
        # checkpoint — the first step below pause_ratio ends the pause.)
        moderate = self._level_moved or (bool(self._held) and
                                         math.log(self._held[0][2]) - self._mu < 2 * self._clip)
        limit = self._clip / 2 if moderate else self._clip
        outlier = self._mu is not None and math.log(value) - self._mu >= limit
        if not outlier:
            self._level_moved = False
            self._end_pause()
        elif not self._level_moved:
            self._held.append((step, time, value))
            if len(self._held) < self.cfg.max_pause_steps:
                return False
            self._level_moved = True  # no pause lasts this long: the level moved
            held, self._held = self._held, []
            return any([self._add(*h) for h in held])
        return self._add(step, time, value)

    def feed_many(self, steps: list, times: list, values: list) -> bool:
        """:meth:`feed` for each (a batch, as columns); True when ``condition`` changed.

        Up to the next block boundary the baseline stands still, so a run of steps that are
        all plain (finite, positive, below the pause limit, no pause being held) goes into the
        block at once; anything else takes the step-by-step path."""
        changed, i, n, size = False, 0, len(values), self.cfg.block_steps
        while i < n:
            j = min(n, i + size - len(self._block))
            part = values[i:j]
            low, high, total = min(part), max(part), sum(part)
            if (self._held or self._level_moved or not low > 0 or not math.isfinite(total)
                    or (self._mu is not None and math.log(high) - self._mu >= self._clip)):
                for k in range(i, j):
                    changed |= self.feed(steps[k], times[k], values[k])
                i = j
                continue
            if self._block_start is None:
                self._block_start = (steps[i], times[i])
            self._block.extend(part)
            i = j
            if len(self._block) >= size:
                y, start = math.log(median(self._block)), self._block_start
                self._block, self._block_start = [], None
                changed |= self._on_block(y, start)
        return changed

    def _end_pause(self) -> None:
        if self._held:
            kind = "stall" if len(self._held) == 1 else "pause"
            self.pauses[kind] = self.pauses.get(kind, 0) + 1
            self._held = []

    def _add(self, step: int, time: float, value: float) -> bool:
        if self._block_start is None:
            self._block_start = (step, time)
        self._block.append(value)
        if len(self._block) < self.cfg.block_steps:
            return False
        y, start = math.log(median(self._block)), self._block_start
        self._block, self._block_start = [], None
        return self._on_block(y, start)

    # -- blocks ---------------------------------------------------------------------------------
    def _on_block(self, y: float, start: tuple[int, float]) -> bool:
        self._blocks += 1
        self._lag.append(y)
        # A shift must be able to raise (min_duration_s included) before its blocks could
        # reach the baseline.
        if len(self._lag) > max(self._lag_blocks, self._n_time + self._n):
            old = self._lag.popleft()
            if self.condition is None:
                self._base.append(old)
                self._mu = None  # recomputed below
        self._history.append(start[0], start[1], y)
        if self.condition is not None:
            self._since.append(y)
        if len(self._base) < self._min_base:
            return False
        if self._mu is None:
            self._mu = self._base.median()
            self._sigma = None  # the MAD when a test first needs it (most blocks' tests stop before)
            block_s = math.exp(self._mu) * self.cfg.block_steps
            self._n_time = min(_MAX_TIME_BLOCKS, math.ceil(self.cfg.min_duration_s / block_s))
            # Wide windows are tested every few blocks, not every block (cost per rank bounded).
            self._jump_stride = max(1, self._n_time // 16)
        self.baseline_s = math.exp(self._mu)
        raw = y - self._mu
        d = min(raw, self._clip)
        self._cusum = max(0.0, self._cusum + d - self._k)
        if self._cusum == 0.0 and self.condition is None:
            if self._run:  # (a clear makes new arrays)
                self._run.clear()
        else:
            self._run.append(start[0], start[1], d, raw)
        self._recent.append(y)
        return self._judge()

    def _spread(self) -> float:
        """The baseline's spread in log units: 1.4826 x its MAD, at least _SIGMA_FLOOR."""
        if self._sigma is None:
            self._sigma = max(1.4826 * self._base.mad(self._mu), _SIGMA_FLOOR)
        return self._sigma

    def _estimate_onset(self, ys: list, ref: float, level: float) -> int:
        """Index in ``ys`` (log block medians) of the maximum-likelihood start of a shift of
        ``level`` above ``ref`` (log units)."""
        if not ys:
            return 0
        clip = self._clip
        half = min(level, clip) / 2
        # the gain of starting at each block, summed from the newest back (in C); the first
        # (newest) start where the sum peaks
        totals = list(itertools.accumulate([min(y - ref, clip) - half for y in reversed(ys)]))
        return len(ys) - 1 - totals.index(max(totals))

    def _judge(self) -> bool:
        cfg, old = self.cfg, self.condition
        if len(self._recent) < self._n:
            return False
        if old is None:
            found = self._by_cusum() or self._by_jump()
            if found is None or self._history[-1][1] - found[1][1] < cfg.min_duration_s:
                # (the jump test's median turns once most of its window has moved: the change
                # itself must also have lasted min_duration_s of data time)
                return False
            self._ref, self._onset = found
            self._since = collections.deque((y for s, _, y in self._history if s >= self._onset[0]),
                                            maxlen=_SUSTAINED_BLOCKS)
            self._quiet, self._jump_hits = 0, 0
        else:
            recent = median(self._recent) - self._ref
            self._quiet = self._quiet + 1 if recent < 0.6 * math.log1p(cfg.info_ratio) else 0
            if self._quiet >= self._clear_blocks:
                self.condition, self._onset, self._ref = None, None, None
                self._run.clear()
                self._cusum = 0.0
                return True
        return self._set(median(self._since) - self._ref, old)

    def _by_cusum(self) -> Optional[tuple[float, tuple[int, float]]]:
        """(reference, onset) of a shift against the baseline found by the CUSUM run, or None."""
        cfg, mu = self.cfg, self._mu
        if len(self._run) < self._n:
            return None
        recent = median(self._recent) - mu
        if recent < _RAISE * math.log1p(cfg.info_ratio) / 2:
            return None
        ys = [raw + mu for raw in self._run.tail(3, len(self._run))]  # the run's log block medians
        onset = self._estimate_onset(ys, mu, recent)
        level = median(ys[onset:][-_SUSTAINED_BLOCKS:]) - mu
        blocks = len(ys) - onset
        # Below the warning level the baseline test does not raise: a slow wobble of the job's
        # speed reaches a few percent against a lagged baseline; the local jump test decides.
        # The onset is chosen where the shift looks largest, so a few noisy blocks can look like
        # one: the level's lower confidence bound must clear info_ratio as well.
        bound = level - cfg.z_min * 1.25 * self._spread() / math.sqrt(blocks)
        if blocks < max(self._n, self._n_time) or level < math.log1p(cfg.warning_ratio) * _RAISE \
                or bound < math.log1p(cfg.info_ratio):
            return None
        return mu, self._run[onset][:2]

    def _by_jump(self) -> Optional[tuple[float, tuple[int, float]]]:
        """(level before, onset) of a local step up, or None: the last blocks' median against
        the median of the _BEFORE_BLOCKS before them (two blocks running)."""
        cfg, hist, hit = self.cfg, self._history, None
        if self._jump_stride > 1 and self._blocks % self._jump_stride:
            return None
        before = max(_BEFORE_BLOCKS, self._n_time)
        for after, ratio in ((max(self._n_jump_warn, self._n_time), cfg.warning_ratio),
                             (max(self._n_info, self._n_time), cfg.info_ratio)):
            if len(hist) < after + before:
                continue
            ys = hist.tail(2, after + before)  # the tail only, one column
            ref, level = median(ys[:before]), median(ys[before:])
            jump = level - ref
            if jump < _JUMP_RAISE * math.log1p(ratio) or level - self._mu < math.log1p(cfg.info_ratio) / 3 \
                    or jump < (cfg.z_min + _JUMP_EXTRA_Z) * (1.25 * self._spread() * math.sqrt(1 / after + 1 / before)):
                continue
            # The onset of the shift as it stands now: when a second, larger change follows a
            # small one within the window, the onset is the larger change's (a +5% shift at
            # step 331 then +45% at 400 is "since 400", measured against the level before 331).
            now = max(jump, median(self._recent) - ref)
            hit = ref, hist[len(hist) - len(ys) + self._estimate_onset(ys, ref, now)][:2]
            break
        self._jump_hits = self._jump_hits + 1 if hit else 0
        return hit if self._jump_hits >= 2 else None

    def _set(self, level: float, old: Optional[Condition]) -> bool:
        cfg = self.cfg
        shift = math.expm1(max(level, 0.0))
        severity = _severity(shift, cfg, old.severity if old is not None else None)
        if old is not None and SEVERITIES.index(severity) < SEVERITIES.index(old.severity):
            # Down a level only once the level has stayed below it for clear_steps: early in an
            # episode the median of a few blocks swings (one GPU job went critical -> warning
            # -> critical -> warning -> info within 4 s).
            self._down += 1
            if self._down < self._clear_blocks:
                severity = old.severity
            else:
                self._down = 0
        else:
            self._down = 0
        step, since = self._onset
        base_ms = math.exp(self._ref) * 1e3
        against = "vs baseline" if self._ref == self._mu else "vs the level before"
        summary = (f"step time {shift:+.1%} {against} ({base_ms:.1f} ms -> {base_ms * (1 + shift):.1f} ms) "
                   f"since step {step:,}")
        self.condition = Condition("StepwatchThroughputDrift", self.job, self.rank, severity, summary,
                                   since, step, cfg.for_s, ratio=1 + shift)
        return self.condition != old


def _severity(shift: float, cfg: DriftConfig, old: Optional[str]) -> str:
    """The level whose threshold ``shift`` reaches; staying at ``old`` down to 0.8x its threshold."""
    thresholds = {INFO: cfg.info_ratio, WARNING: cfg.warning_ratio, CRITICAL: cfg.critical_ratio}
    level = INFO
    for name in SEVERITIES:
        if shift >= thresholds[name]:
            level = name
    if old in thresholds and SEVERITIES.index(old) > SEVERITIES.index(level) \
            and shift >= 0.8 * thresholds[old]:
        return old
    return level
