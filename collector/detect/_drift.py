"""Throughput drift of one rank against its own lagged, robust baseline.

Per step the engine feeds a step time (seconds, normalised to the first token count seen when
tokens are reported). Every ``block_steps`` steps the block median's log joins a lag queue;
blocks leave the queue into the baseline (median and 1.4826*MAD of the last
``baseline_steps``) only while no drift is flagged, so a lasting regression does not become
the new normal. A one-sided CUSUM on the log ratio (allowance half the warning shift) dates the
change point; the alarm needs the CUSUM run to have lasted ``min_duration_steps``, the median
of the blocks in that span to be >= ``warning_ratio`` above baseline, and that shift to stand
``z_min`` standard errors out. It clears below 60% of the warning shift. O(1) per step
amortised (one sort of the baseline per block). Not thread-safe: one caller at a time.
"""

from __future__ import annotations

import collections
import math
from typing import Optional

from ._config import DriftConfig
from ._types import CRITICAL, WARNING, Condition, finite_positive, median

__all__ = ["DriftDetector"]

_SIGMA_FLOOR = 0.002  # log units (0.2%): keeps z finite on perfectly steady series


class DriftDetector:
    """``feed`` returns True when ``condition`` (None or an active Condition) changed."""

    def __init__(self, cfg: DriftConfig, job: str, rank: int):
        self.cfg, self.job, self.rank = cfg, job, rank
        b = cfg.block_steps
        self._n = max(1, math.ceil(cfg.min_duration_steps / b))
        self._lag = collections.deque()
        self._lag_blocks = math.ceil(cfg.baseline_lag_steps / b)
        self._base = collections.deque(maxlen=max(1, cfg.baseline_steps // b))
        self._min_base = max(2, math.ceil(cfg.min_baseline_steps / b))
        self._recent = collections.deque(maxlen=self._n)
        self._block: list[float] = []
        self._block_start: Optional[tuple[int, float]] = None
        self._k = math.log1p(cfg.warning_ratio) / 2
        self._cusum = 0.0
        self._run = 0
        self._change: Optional[tuple[int, float]] = None
        self.condition: Optional[Condition] = None
        self.baseline_s: Optional[float] = None

    def feed(self, step: int, time: float, value: float) -> bool:
        if not finite_positive(value):
            return False
        if self._block_start is None:
            self._block_start = (step, time)
        self._block.append(value)
        if len(self._block) < self.cfg.block_steps:
            return False
        y, start = math.log(median(self._block)), self._block_start
        self._block, self._block_start = [], None
        return self._on_block(y, start)

    def _on_block(self, y: float, start: tuple[int, float]) -> bool:
        self._lag.append(y)
        if len(self._lag) > self._lag_blocks:
            old = self._lag.popleft()
            if self.condition is None:
                self._base.append(old)
        if len(self._base) < self._min_base:
            return False
        mu = median(self._base)
        sigma = max(1.4826 * median(abs(v - mu) for v in self._base), _SIGMA_FLOOR)
        self.baseline_s = math.exp(mu)
        d = y - mu
        self._cusum = max(0.0, self._cusum + d - self._k)
        if self._cusum == 0.0:
            self._run, self._change = 0, None
        else:
            self._run += 1
            self._change = self._change or start
        self._recent.append(d)
        return self._judge(sigma)

    def _judge(self, sigma: float) -> bool:
        cfg, old = self.cfg, self.condition
        level = median(self._recent) if len(self._recent) == self._n else 0.0
        shift = math.expm1(level)
        significant = level >= cfg.z_min * 1.25 * sigma / math.sqrt(self._n)
        if old is None:
            active = self._run >= self._n and shift >= cfg.warning_ratio and significant
        else:
            active = shift >= 0.6 * cfg.warning_ratio
        if not active:
            self.condition = None
            return old is not None
        step, since = (old.step, old.since) if old is not None else (self._change or (0, 0.0))
        sticky = 0.8 if old is not None and old.severity == CRITICAL else 1.0  # no flapping at the edge
        severity = CRITICAL if shift >= sticky * cfg.critical_ratio else WARNING
        base_ms = self.baseline_s * 1e3
        summary = (f"step time {shift:+.1%} vs baseline ({base_ms:.1f} ms -> {base_ms * (1 + shift):.1f} ms) "
                   f"since step {step:,}")
        self.condition = Condition("StepwatchThroughputDrift", self.job, self.rank, severity, summary,
                                   since, step, cfg.for_s)
        return self.condition != old
