"""The sidecar's configuration: the first line the trainer writes on its stdin.

The line is a :func:`stepwatch.core.contract.config` record: the trainer's resolved
:class:`~stepwatch.agent._options.AgentSettings` by name, the trainer's pid and the Hello
fields by name. The settings are validated here by the same declaration that resolved them
in the trainer (source "config line"); a bad value raises :class:`ConfigError` naming it.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Mapping

from stepwatch.proto.stepwatch.v1 import agent_pb2

from stepwatch.core import contract
from .._options import AgentSettings
from stepwatch.core.settings import SettingsError, load_section

__all__ = ["ConfigError", "SidecarConfig", "build_hello", "gpu_identity"]


class ConfigError(ValueError):
    """A config line the sidecar cannot run with; the message names the key and the value."""


@dataclasses.dataclass(frozen=True)
class SidecarConfig:
    settings: AgentSettings
    hello: agent_pb2.Hello
    trainer_pid: int = 0
    workdir: str = ""  # the trainer's temporary directory, removed at shutdown

    @classmethod
    def from_record(cls, obj: Any) -> "SidecarConfig":
        """Build from the decoded first stdin line; raises :class:`ConfigError`."""
        if not isinstance(obj, dict) or obj.get("t") != contract.CONFIG:
            raise ConfigError(f"first line must be an object with t='config', got {obj!r:.200}")
        try:
            settings = load_section(AgentSettings, obj.get("settings") or {}, "config line")
        except SettingsError as exc:
            raise ConfigError(str(exc)) from None
        try:
            pid = int(obj.get("trainer_pid") or 0)
        except (TypeError, ValueError):
            raise ConfigError(f"config key 'trainer_pid': invalid value "
                              f"{obj.get('trainer_pid')!r}: expected an integer") from None
        hello = build_hello(obj.get("hello") or {})
        if not hello.job:
            raise ConfigError("config key 'hello.job' is required and must not be empty")
        return cls(settings, hello, pid, str(obj.get("workdir") or ""))

    @property
    def log_level_number(self) -> int:
        level = logging.getLevelName(self.settings.log_level)
        return level if isinstance(level, int) else logging.WARNING


def gpu_identity(obj: Mapping[str, Any]) -> agent_pb2.GpuIdentity:
    """GpuIdentity from a ``gpu`` record; the UUID in NVML style
    (:func:`~stepwatch.core.contract.normalize_uuid`). TypeError/ValueError on bad types."""
    ident = agent_pb2.GpuIdentity()
    for key in ("index", "name", "total_memory_bytes"):
        if obj.get(key) is not None:
            setattr(ident, key, obj[key])
    ident.uuid = contract.normalize_uuid(obj.get("uuid"))
    return ident


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
