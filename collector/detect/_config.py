"""Detector settings: nested frozen dataclasses with the defaults of ARCHITECTURE.md.

The collector's ``detection`` option (YAML mapping under ``detection:`` in the config file, or
YAML/JSON text in ``STEPWATCH_DETECTION`` / ``--detection``) is parsed by :func:`parse_detection`.
Units: ``*_steps`` are optimizer steps, ``*_s`` seconds, ``*_ratio`` fractions (0.05 = 5%).
A bad key or value raises ValueError naming the dotted key (``drift.block_steps``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

__all__ = ["DetectionConfig", "DriftConfig", "StragglerConfig", "MemoryConfig", "GpuConfig",
           "LivenessConfig", "parse_detection", "describe_options"]


@dataclasses.dataclass(frozen=True)
class DriftConfig:
    enabled: bool = True
    block_steps: int = 10             # one block median per this many steps
    # Robust baseline over this many steps ... 3000, not 1000: with 1000 the baseline follows a
    # slow ramp (+10% over 2000 steps) and never alarms (bench/results/detection.md).
    baseline_steps: int = 3000
    baseline_lag_steps: int = 100     # ... ending this many steps before the newest
    min_baseline_steps: int = 200     # no verdict before the baseline holds this many steps
    min_duration_steps: int = 50      # a shift must last this long before it alarms
    warning_ratio: float = 0.05       # +5% step time: warning
    critical_ratio: float = 0.10      # +10%: critical
    z_min: float = 3.0                # and the shift must stand z_min baseline sigmas out
    for_s: float = 0.0                # pending time before firing (the step rule already waits)


@dataclasses.dataclass(frozen=True)
class StragglerConfig:
    enabled: bool = True
    block_steps: int = 10
    ratio: float = 1.2                # rank time / median of the other ranks
    robust_z: float = 3.5             # and robust z against the other ranks' spread
    window_blocks: int = 10           # judged over the last this many blocks ...
    min_blocks: int = 8               # ... of which this many must be slow
    jitter_floor_ratio: float = 0.02  # spread floor (share of step time) for the z score
    for_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class MemoryConfig:
    enabled: bool = True
    fragmentation_ratio: float = 0.25   # inactive_split / reserved at or above this ...
    near_capacity_ratio: float = 0.90   # ... while device memory used / total is at least this
    retry_hold_s: float = 600.0         # alloc-retries alert stays this long after an increase
    oom_hold_s: float = 3600.0          # OOM alert stays this long after an increase
    leak_window_s: float = 1800.0       # leak trend judged over this window ...
    leak_segments: int = 6              # ... split in this many segments whose medians must rise
    leak_min_growth_ratio: float = 0.10 # ... by at least this share of the starting level
    forecast_horizon_s: float = 3600.0  # critical when exhaustion is forecast sooner than this
    fragmentation_for_s: float = 60.0
    leak_for_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class GpuConfig:
    enabled: bool = True
    # NVML clock-event bits that count as throttling: hw_slowdown 0x8, sw_thermal 0x20,
    # hw_thermal 0x40, hw_power_brake 0x80. sw_power_cap (0x4) is normal at full load.
    throttle_mask: int = 0xE8
    for_s: float = 60.0


@dataclasses.dataclass(frozen=True)
class LivenessConfig:
    enabled: bool = True
    stall_factor: float = 20.0        # stalled: no step for stall_factor x usual step time ...
    stall_min_s: float = 300.0        # ... and at least this long (checkpoints, evaluation)
    agent_gone_s: float = 120.0       # a rank disconnected this long while others are connected


@dataclasses.dataclass(frozen=True)
class DetectionConfig:
    enabled: bool = True
    warmup_steps: int = 100           # steps of each rank ignored (compilation, warm-up)
    eval_interval_s: float = 5.0      # collector tick for time-based rules and `for` durations
    resolved_retention_s: float = 3600.0  # resolved alerts listed on /api/alerts this long
    drift: DriftConfig = DriftConfig()
    straggler: StragglerConfig = StragglerConfig()
    memory: MemoryConfig = MemoryConfig()
    gpu: GpuConfig = GpuConfig()
    liveness: LivenessConfig = LivenessConfig()


_BOOL = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def _coerce(name: str, kind: Any, value: Any) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        if str(value).strip().lower() in _BOOL:
            return _BOOL[str(value).strip().lower()]
        raise ValueError(f"detection.{name}: expected a boolean, got {value!r}")
    try:
        out = int(value, 0) if kind is int and isinstance(value, str) else kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"detection.{name}: expected {kind.__name__}, got {value!r}") from None
    if isinstance(out, bool) or (kind is int and isinstance(value, float) and value != int(value)):
        raise ValueError(f"detection.{name}: expected {kind.__name__}, got {value!r}")
    if not out >= 0 or out == float("inf"):
        raise ValueError(f"detection.{name}: must be a finite number >= 0, got {value!r}")
    return out


def _build(cls: type, data: Mapping[str, Any], prefix: str) -> Any:
    if not isinstance(data, Mapping):
        raise ValueError(f"detection{prefix and '.' + prefix.rstrip('.')}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise ValueError(f"detection: unknown key {prefix}{key!r}; known: {', '.join(fields)}")
        default = fields[key].default
        if dataclasses.is_dataclass(default):
            kwargs[key] = _build(type(default), value or {}, f"{prefix}{key}.")
        else:
            kwargs[key] = _coerce(prefix + key, type(default), value)
    return _check(cls(**kwargs), prefix)


def _check(cfg: Any, prefix: str) -> Any:
    for name in ("block_steps", "window_blocks", "leak_segments"):
        if getattr(cfg, name, 1) < 1:
            raise ValueError(f"detection.{prefix}{name}: must be >= 1")
    if isinstance(cfg, DriftConfig) and cfg.critical_ratio < cfg.warning_ratio:
        raise ValueError("detection.drift.critical_ratio: must be >= warning_ratio")
    if isinstance(cfg, StragglerConfig) and cfg.min_blocks > cfg.window_blocks:
        raise ValueError("detection.straggler.min_blocks: must be <= window_blocks")
    return cfg


def parse_detection(value: Any) -> DetectionConfig:
    """A DetectionConfig from a mapping, YAML/JSON text, an existing config, or None (defaults)."""
    if isinstance(value, DetectionConfig):
        return value
    if value is None or value == "":
        return DetectionConfig()
    if isinstance(value, str):
        import yaml

        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ValueError(f"detection: not valid YAML: {exc}") from None
    return _build(DetectionConfig, value or {}, "")


def describe_options() -> str:
    """One line per option, ``detection.drift.block_steps = 10``, for --help and the README."""
    lines = []

    def walk(obj: Any, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
            else:
                lines.append(f"  {prefix}{f.name} = {hex(value) if f.name.endswith('mask') else value!r}")

    walk(DetectionConfig(), "")
    return "\n".join(lines)
