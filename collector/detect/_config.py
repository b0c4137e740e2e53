"""Detector settings: nested frozen dataclasses declared with :mod:`stepwatch.core.settings`.

The collector's ``detection`` section (YAML mapping under ``detection:`` in the config file, or
YAML/JSON text in ``STEPWATCH_DETECTION`` / ``--detection``) is resolved by the one settings
model. Units: ``*_steps`` are optimizer steps, ``*_s`` seconds, ``*_ratio`` fractions
(0.05 = 5%). Every number is finite and >= 0; a bad key or value is a SettingsError naming the
dotted key (``detection.drift.block_steps``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from stepwatch.core.settings import (at_least, between, describe, load_section,
                                      non_negative, option, section)

from ._types import SEVERITIES

__all__ = ["DetectionConfig", "DriftConfig", "StragglerConfig", "MemoryConfig", "GpuConfig",
           "LivenessConfig", "parse_detection", "describe_options"]


def _n(default: Any, help: str) -> Any:
    """A detector number: finite and >= 0."""
    return option(default, help, check=non_negative())


def _count(default: int, help: str) -> Any:
    return option(default, help, check=at_least(1))


def _severity_name(value: Any) -> str:
    name = str(value).strip().lower()
    if name not in SEVERITIES:
        raise ValueError("expected info, warning or critical")
    return name


def _on(help: str = "run this detector") -> Any:
    return option(True, help)


@dataclasses.dataclass(frozen=True)
class DriftConfig:
    """Horizons are seconds of job time, not steps: a machine's speed wobbles over seconds
    whatever the step length. Defaults were set on real H100 recordings (tests/data/real,
    bench/results/detection_real.md): silent on every healthy one."""
    enabled: bool = _on()
    bucket_s: float = option(5.0, "steps are judged as the median of each this many seconds",
                             check=at_least(0.01))
    min_bucket_steps: int = _count(5, "... holding at least this many steps")
    bucket_mean: bool = option(False, "judge each bucket by the mean of its kept steps (its wall time per step, "
                               "pauses left out) instead of their median")
    floor_quantile: float = option(0.1, "a second test of the same windows judges this quantile of each "
                                   "bucket's steps, its floor (0: off): either raises", check=between(0.0, 0.5))
    warmup_s: float = _n(60.0, "nothing is judged this long after a rank's first step (compilation, "
                         "allocator growth, the loader starting, the first profiler windows)")
    settle_s: float = _n(120.0, "then the job's settled level and spread are learnt this long; armed after")
    info_ratio: float = _n(0.03, "+3% sustained step time: info (the lowest level raised)")
    warning_ratio: float = _n(0.05, "+5% step time: warning")
    critical_ratio: float = _n(0.10, "+10%: critical")
    critical_window_s: float = option(30.0, "a critical shift must hold this long", check=at_least(0.01))
    critical_sustain: float = option(1.5, "... and, raised from no episode and under 1.5x critical_ratio, stand "
                                     "above half its size on two thirds of this many critical windows (a "
                                     "real job's hump: +10% for 25 s), unless its evidence stands evidence_z "
                                     "of its own spreads out", check=at_least(1.0))
    warning_window_s: float = option(90.0, "a warning shift must hold this long", check=at_least(0.01))
    info_window_s: float = option(240.0, "an info shift must hold this long", check=at_least(0.01))
    z: float = _n(4.0, "and stand this many of the job's own spreads (medians over that window) out")
    noise_history_s: float = _n(1800.0, "the spreads are measured over this much quiet history")
    pause_ratio: float = option(1.5, "a step this many times the current level is a pause (evaluation, "
                                "checkpoint, stall): counted, never drift", check=at_least(1.05))
    max_pause_steps: int = _count(100, "a run of this many pause steps is a level change, not a pause")
    clear_s: float = option(60.0, "an episode ends once the median of this long is back under half "
                            "of info_ratio and 40% of the shift it was raised on", check=at_least(0.01))
    for_s: float = _n(0.0, "pending time before firing (the windows already wait)")
    transient_s: float = _n(600.0, "an episode that ends by itself within this long of its onset was the job's "
                            "own wave: a later shift no larger than it raises only once it has outlasted it "
                            "(0: off)")
    evidence: bool = option(True, "decide with the evidence: a shift that comes with one phase's device time, "
                            "the data-loader wait (30% when it grew 4x its level) or allocator calls grown by "
                            "half of it is a change of the job, raised whatever came before (no wave or "
                            "settling holds it back); off: the step times alone")
    evidence_z: float = _n(4.0, "... and a warning or critical one whose evidence stands this many of that "
                           "source's own spreads out (its medians over the same span, in the quiet history) "
                           "is raised at the severity's ratio, whatever the step time's spread (a phase "
                           "whose host time grew with it counts only when it is forward, backward or the "
                           "optimizer and grew 3x faster than the step)")

    def __post_init__(self) -> None:
        if not self.info_ratio <= self.warning_ratio <= self.critical_ratio:
            raise ValueError("drift: must have info_ratio <= warning_ratio <= critical_ratio")
        if not self.critical_window_s <= self.warning_window_s <= self.info_window_s:
            raise ValueError("drift: must have critical_window_s <= warning_window_s <= info_window_s")


@dataclasses.dataclass(frozen=True)
class StragglerConfig:
    enabled: bool = _on()
    block_steps: int = _count(10, "one block median per this many steps")
    ratio: float = _n(1.2, "rank time / median of the other ranks")
    robust_z: float = _n(3.5, "and robust z against the other ranks' spread")
    window_blocks: int = _count(10, "judged over the last this many blocks ...")
    min_blocks: int = _n(8, "... of which this many must be slow")
    jitter_floor_ratio: float = _n(0.02, "spread floor (share of step time) for the z score")
    phase_ratio: float = _n(1.08, "phase times: 1 + (a rank's own time per step - the other ranks' "
                            "median) / their step time at or above this (and the z score above) ... "
                            "(two H100s, 4 ms of GEMMs in one rank's DDP backward: the job +12%, the "
                            "rank's own excess 1.087, the rest of the wait hidden in the other's backward)")
    phase_wait_share: float = _n(0.2, "... while the others wait in sync at least this share of the excess "
                                 "longer (two H100s: a 6.5 ms wait showed 1.7 ms in sync, the rest in backward)")
    phase_cost_share: float = _n(0.5, "... and, to raise, the job's step time has grown by at least this share "
                                 "of the excess over its level before (a healthy launch-bound NCCL job on two "
                                 "H100s showed 1.2x excesses that flipped between ranks and cost nothing) ...")
    phase_cost_s: float = _n(6.0, "... in a run of slow blocks that has lasted this long (real H100 NCCL jobs: "
                             "a healthy launch-bound one showed a 5.6 s run while its step grew 0.9 ms; "
                             "a busy host's runs lasted 6.6 and 7.6 s) ...")
    phase_persist_s: float = _n(30.0, "... or the rank has shown the excess for this long (slow from the start; the healthy job above: 7 s at most, a rank on a shared H100: 38 s)")
    # 1.2, not 1.1: healthy CPU-only ranks on a loaded 2-core machine differed 1.14-1.26x in
    # host compute per window (GPU ranks: 1.00x, bench/results/straggler_gpu_h200.txt).
    compute_ratio: float = _n(1.2, "profiler windows: a rank's compute per step / median of the "
                              "other ranks' at or above this ...")
    wait_share: float = _n(0.5, "... while the others spend between this share and its inverse of the "
                           "excess longer outside compute (in collectives; the slow rank waits least)")
    # 3 of 4, not 2 of 3: two skewed windows out of three came from the scheduler alone on a
    # loaded 2-core machine (a healthy CPU job, 1.67x for a few ms of compute).
    compute_windows: int = _count(4, "judged over the last this many aligned windows ...")
    min_compute_windows: int = _count(3, "... of which this many must show the skew")
    # Real 2- and 4-GPU NCCL recordings (tests/data/real): healthy ranks 0.95-1.05x the others
    # for minutes (one 5 s bucket 1.18x); GEMMs added to one rank's backward 1.26-1.64x.
    activity_bucket_s: float = option(5.0, "GPU activity (NVML GPM tensor + FP pipes, always on): each rank's "
                                      "median over this many seconds ...", check=at_least(0.5))
    activity_warmup_s: float = _n(60.0, "... after this long from the rank's first sample ...")
    activity_reference_buckets: int = _count(12, "... its ratio to the other ranks' median over its first this "
                                             "many buckets is its reference ...")
    activity_rise: float = option(0.15, "... a rank is flagged when its ratio stands this much above its "
                                  "reference (0.15: 1.00x -> 1.15x) ...", check=at_least(0.01))
    activity_buckets: int = _count(4, "... in each of its last this many buckets (cleared when each is under "
                                   "half of it)")
    activity_floor: float = _n(0.02, "... activities below this count as this (idle GPUs are even)")
    for_s: float = _n(0.0, "pending time before firing")

    def __post_init__(self) -> None:
        if self.min_blocks > self.window_blocks:
            raise ValueError("straggler.min_blocks: must be <= window_blocks")
        if self.min_compute_windows > self.compute_windows:
            raise ValueError("straggler.min_compute_windows: must be <= compute_windows")


@dataclasses.dataclass(frozen=True)
class MemoryConfig:
    enabled: bool = _on()
    fragmentation_ratio: float = _n(0.25, "inactive_split / reserved at or above this ...")
    near_capacity_ratio: float = _n(0.90, "... while device memory used / total is at least this")
    retry_hold_s: float = _n(600.0, "alloc-retries alert stays this long after an increase")
    oom_hold_s: float = _n(3600.0, "OOM alert stays this long after an increase")
    leak_window_s: float = _n(1500.0, "leak trend judged over this window ...")
    leak_segments: int = _count(6, "... split in this many segments whose medians must rise")
    leak_min_growth_ratio: float = _n(0.10, "... by at least this share of the starting level")
    leak_min_capacity_ratio: float = _n(0.02, "... or of the device's (host's) capacity: a slow leak "
                                        "on a large device")
    leak_long_window_s: float = _n(6000.0, "and the same judged over this longer window (0: off): a slow "
                                   "leak on a large allocation (3 GiB/h on 15.6 GB: +8% in 25 min, +32% in 100)")
    forecast_horizon_s: float = _n(3600.0, "critical when exhaustion is forecast sooner than this")
    fragmentation_for_s: float = _n(60.0, "pending time of the fragmentation alert")
    leak_for_s: float = _n(0.0, "pending time of the leak alerts")


@dataclasses.dataclass(frozen=True)
class GpuConfig:
    enabled: bool = _on()
    # NVML clock-event bits that count as throttling: hw_slowdown 0x8, sw_thermal 0x20,
    # hw_thermal 0x40, hw_power_brake 0x80. sw_power_cap (0x4) is normal at full load.
    throttle_mask: int = _n(0xE8, "NVML clock-event reason bits that count as throttling")
    for_s: float = _n(60.0, "pending time before firing")


@dataclasses.dataclass(frozen=True)
class LivenessConfig:
    enabled: bool = _on()
    stall_factor: float = _n(20.0, "stalled: no step for stall_factor x usual step time ...")
    stall_min_s: float = _n(300.0, "... and at least this long (checkpoints, evaluation)")
    agent_gone_s: float = _n(120.0, "a rank disconnected this long while others are connected")
    duplicate_for_s: float = _n(30.0, "two live sessions claim one rank this long (a process that "
                                "learns its rank from torch.distributed after attach reconnects)")


@dataclasses.dataclass(frozen=True)
class RunsConfig:
    """A job's runs compared with each other (detect/_lineage.py)."""
    enabled: bool = option(True, "compare each run's settled level with the job's run before it (same name, world "
                           "size, tokens and samples per step)")
    min_ratio: float = option(0.05, "a run settled this much slower than the run before it, and by more than both "
                              "runs' noise, raises StepwatchRunRegression", check=at_least(0.0))
    wait_s: float = _n(300.0, "compared with the ranks settled this long after the first one did, if not all have")
    keep: int = _count(50, "runs kept per job (in state_dir; in memory without one)")


@dataclasses.dataclass(frozen=True)
class DetectionConfig:
    enabled: bool = _on("run detection at all")
    warmup_steps: int = _n(100, "steps of each rank ignored (compilation, warm-up)")
    eval_interval_s: float = _n(5.0, "collector tick for time-based rules and `for` durations")
    resolved_retention_s: float = _n(3600.0, "resolved alerts listed on /api/alerts this long")
    # 30, not 60: on the steady held-out real jobs a +5/+10% change that went away resolved a
    # median 71-76 s after it ended (36 of 42 within 2 minutes) against 101-106 s (32 of 42) at
    # 60, with the same episodes per change everywhere but one more split of a ramp on a host
    # that wandered (bench/results/detection_real_long.md)
    resolve_hold_s: float = _n(30.0, "an alert resolves only once its condition has been absent "
                               "this long; back within it, the same episode goes on")
    trace_steps: int = _n(5, "steps of a full trace captured when a slowdown alert fires (0: none)")
    trace_every_s: float = _n(3600.0, "at most one such trace per job this often")
    # An info episode (+3%) asks for an early window only: a healthy one-minute H100 job raised
    # +2.9% "vs the level before" and the trace it asked for cost 0.7% of its wall time.
    trace_min_severity: str = option("warning", "... and only for an episode at or above this "
                                     "severity (info, warning, critical; it may get there later)",
                                     parse=lambda v: _severity_name(v))
    drift: DriftConfig = section(DriftConfig, "throughput drift")
    straggler: StragglerConfig = section(StragglerConfig, "straggler rank")
    memory: MemoryConfig = section(MemoryConfig, "allocator and memory leaks")
    gpu: GpuConfig = section(GpuConfig, "GPU throttling")
    liveness: LivenessConfig = section(LivenessConfig, "stalls and agents gone")
    runs: RunsConfig = section(RunsConfig, "run-to-run regressions")


def parse_detection(value: Any, source: str = "argument") -> DetectionConfig:
    """A DetectionConfig from a mapping, YAML/JSON text, an existing config, or None
    (defaults); SettingsError naming the dotted key."""
    if isinstance(value, DetectionConfig):
        return value
    return load_section(DetectionConfig, value, source, "detection.")


def describe_options() -> str:
    """One line per option, ``detection.drift.block_steps = 10``, for --help."""
    return "\n".join(f"  {name} = {default!r}" for name, _env, default, _help in
                     describe(DetectionConfig, hex_names=("throttle_mask",)))
