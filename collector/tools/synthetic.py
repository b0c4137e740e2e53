"""Synthetic step-time series built like real training, for the detection backtest
(bench/detection.py) and the detection tests. Pure Python, seeded, deterministic.

One series is one rank's step times in seconds (base ``base_s``):
- log-normal per-step noise with coefficient of variation ``cv`` (2–4% in real jobs);
- warm-up: the first step 300x (compilation), the next 50 steps decaying from +30%;
- an evaluation pause every ``eval_every`` steps: ``eval_steps`` steps at 10x;
- a checkpoint stall every ``ckpt_every`` steps: one step at 50x;
- garbage-collection spikes: single steps at 2–5x, probability ``gc_rate`` per step;
- data-loader stall bursts: 3–15 steps at 1.5–3x, starting with probability ``burst_rate``;
- a slow wobble of +-``wobble`` (sine, period ``wobble_period`` steps, random phase);
- optionally a change from step ``at`` on: a step of ``size`` ("step") or a linear ramp to
  ``size`` over 2000 steps ("ramp").
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Optional

__all__ = ["Phenomena", "series"]


@dataclasses.dataclass(frozen=True)
class Phenomena:
    cv: float = 0.03
    eval_every: int = 1000
    eval_steps: int = 20
    ckpt_every: int = 2000
    gc_rate: float = 0.005
    burst_rate: float = 1 / 1500
    wobble: float = 0.015
    wobble_period: int = 5000


def series(seed: int, n: int, ph: Phenomena = Phenomena(), change: Optional[tuple] = None,
           at: int = 0, base_s: float = 0.04) -> list[float]:
    """Step times for steps 1..n (index 0 is step 1). ``change`` is ("step" | "ramp", size)."""
    rng = random.Random(seed)
    sigma = math.sqrt(math.log1p(ph.cv ** 2))
    phase = rng.uniform(0, 2 * math.pi)
    out, burst_left, burst_factor = [], 0, 1.0
    for s in range(1, n + 1):
        level = 1.0 + ph.wobble * math.sin(2 * math.pi * s / ph.wobble_period + phase)
        if s <= 51:
            level *= 1 + 0.3 * (51 - s) / 50
        if change is not None and s >= at:
            kind, size = change
            level *= 1 + (size if kind == "step" else size * min(1.0, (s - at) / 2000))
        t = base_s * level * math.exp(rng.gauss(-sigma * sigma / 2, sigma))
        if s == 1:
            t *= 300
        elif ph.eval_every and s % ph.eval_every < ph.eval_steps:
            t *= 10
        elif ph.ckpt_every and s % ph.ckpt_every == ph.eval_steps:
            t *= 50
        elif rng.random() < ph.gc_rate:
            t *= rng.uniform(2, 5)
        if burst_left == 0 and rng.random() < ph.burst_rate:
            burst_left, burst_factor = rng.randint(3, 15), rng.uniform(1.5, 3.0)
        if burst_left:
            t *= burst_factor
            burst_left -= 1
        out.append(t)
    return out
