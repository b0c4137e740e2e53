"""The sidecar's configuration: the first JSON line written by the trainer on stdin.

Contract (all keys optional except ``collector`` and ``hello.job``)::

    {"t": "config", "collector": "host:port", "token": "", "flush_interval_s": 1.0,
     "nvml_interval_s": 1.0, "host_interval_s": 1.0, "spool_dir": "/tmp/stepwatch-spool",
     "spool_max_bytes": 268435456, "reconnect_max_s": 30.0, "shutdown_timeout_s": 5.0,
     "trainer_pid": 123, "log_level": "WARNING", "trace_dir": "/tmp/stepwatch-traces",
     "trace_max_bytes": 2147483648, "trace_max_files": 50, "window_top_k": 10,
     "hello": {...Hello fields by name...}}

Intervals are seconds and must be > 0, as must the byte, file and top-K limits. A bad value
raises :class:`ConfigError` naming the key. Keys added later (trace_*, window_top_k) may be
absent: older trainers get the defaults.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
from typing import Any, Mapping

from stepwatch.proto.stepwatch.v1 import agent_pb2

__all__ = ["ConfigError", "SidecarConfig", "build_hello", "gpu_identity"]


class ConfigError(ValueError):
    """A config line the sidecar cannot run with; the message names the key and the value."""


@dataclasses.dataclass(frozen=True)
class SidecarConfig:
    collector: str
    hello: agent_pb2.Hello
    token: str = ""
    flush_interval_s: float = 1.0
    nvml_interval_s: float = 1.0
    host_interval_s: float = 1.0
    spool_dir: str = "/tmp/stepwatch-spool"
    spool_max_bytes: int = 256 * 1024 * 1024
    reconnect_max_s: float = 30.0
    shutdown_timeout_s: float = 5.0
    trainer_pid: int = 0
    log_level: str = "WARNING"
    trace_dir: str = os.path.join(tempfile.gettempdir(), "stepwatch-traces")
    trace_max_bytes: int = 2 * 1024 ** 3
    trace_max_files: int = 50
    window_top_k: int = 10

    @classmethod
    def from_json(cls, obj: Any) -> "SidecarConfig":
        """Build from the decoded first stdin line; raises :class:`ConfigError`."""
        if not isinstance(obj, dict) or obj.get("t") != "config":
            raise ConfigError(f"first line must be an object with t='config', got {obj!r:.200}")
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            if field.name == "hello" or obj.get(field.name) is None:
                continue
            values[field.name] = _convert(field.name, obj[field.name], type(field.default))
        if "collector" not in values:
            raise ConfigError("config key 'collector' is required (host:port)")
        values["hello"] = build_hello(obj.get("hello") or {})
        if not values["hello"].job:
            raise ConfigError("config key 'hello.job' is required and must not be empty")
        return cls(**values)

    @property
    def log_level_number(self) -> int:
        level = logging.getLevelName(self.log_level.upper())
        return level if isinstance(level, int) else logging.WARNING


_POSITIVE = ("spool_max_bytes", "trace_max_bytes", "trace_max_files", "window_top_k")


def _convert(name: str, raw: Any, kind: type) -> Any:
    if kind is type(dataclasses.MISSING):
        kind = str
    try:
        value = kind(raw)
    except (TypeError, ValueError):
        raise ConfigError(
            f"config key {name!r}: invalid value {raw!r}: expected {kind.__name__}") from None
    if name.endswith("_s") and not value > 0:
        raise ConfigError(f"config key {name!r}: invalid value {raw!r}: must be > 0")
    if name in _POSITIVE and value <= 0:
        raise ConfigError(f"config key {name!r}: invalid value {raw!r}: must be > 0")
    return value


def gpu_identity(obj: Mapping[str, Any]) -> agent_pb2.GpuIdentity:
    """GpuIdentity from ``{"index","uuid","name","total_memory_bytes"}``; the UUID is normalized
    to NVML style ("GPU-" prefix). Raises TypeError/ValueError on bad field types."""
    ident = agent_pb2.GpuIdentity()
    for key in ("index", "name", "total_memory_bytes"):
        if obj.get(key) is not None:
            setattr(ident, key, obj[key])
    ident.uuid = normalize_uuid(obj.get("uuid") or "")
    return ident


def normalize_uuid(uuid: str) -> str:
    """torch reports the UUID without NVML's "GPU-" prefix (and MIG ones as "MIG-..."):
    add "GPU-" when no known prefix is present."""
    uuid = str(uuid).strip()
    if not uuid or uuid.startswith(("GPU-", "MIG-")):
        return uuid
    return "GPU-" + uuid


def build_hello(obj: Mapping[str, Any]) -> agent_pb2.Hello:
    """Hello from its fields by name; unknown keys are ignored; bad types raise ConfigError."""
    hello = agent_pb2.Hello()
    try:
        for key, value in obj.items():
            if value is None or key not in agent_pb2.Hello.DESCRIPTOR.fields_by_name:
                continue
            if key == "gpu":
                hello.gpu.CopyFrom(gpu_identity(value))
            elif key == "config":
                hello.config.update({str(k): str(v) for k, v in value.items()})
            else:
                setattr(hello, key, value)
    except (TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"config key 'hello': {exc}") from None
    return hello
