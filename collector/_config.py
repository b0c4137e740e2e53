"""Collector options: one table, resolved by :func:`stepwatch.agent._settings.resolve`.

Precedence is command-line argument > environment > YAML config file > default. Every
failure (bad value, unknown key, unreadable or non-mapping file) raises
:class:`SettingsError` with a message that names the option or the file.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Mapping, Optional

from stepwatch.agent._settings import Option, SettingsError, parse_hostport, resolve

from .detect import DetectionConfig, parse_detection

__all__ = ["OPTIONS", "CollectorSettings", "SettingsError", "load_settings", "read_config_file"]

_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(text: Any) -> str:
    level = str(text).strip().upper()
    if level not in _LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(_LOG_LEVELS)}")
    return level


def _token(text: Any) -> str:
    value = str(text).strip()
    if any(c.isspace() for c in value):
        raise ValueError("the token must not contain white space")
    return value


OPTIONS = (
    Option("grpc_listen", "STEPWATCH_GRPC_LISTEN", parse_hostport, "0.0.0.0:7470",
           "HOST:PORT the gRPC ingest (agents) listens on; port 0 picks a free port"),
    Option("http_listen", "STEPWATCH_HTTP_LISTEN", parse_hostport, "0.0.0.0:7471",
           "HOST:PORT of the HTTP server (/metrics, /healthz, /api/jobs); port 0 picks a free port"),
    Option("agent_grace_s", "STEPWATCH_AGENT_GRACE_S", float, 300.0,
           "seconds a disconnected rank's series are kept before they expire",
           validate=lambda v: v > 0 and v != float("inf"), constraint="a finite number > 0"),
    Option("auth_token", "STEPWATCH_AUTH_TOKEN", _token, "",
           "shared token agents must send as 'authorization: Bearer <token>'; empty disables auth"),
    Option("max_message_bytes", "STEPWATCH_MAX_MESSAGE_BYTES", int, 4 * 1024 * 1024,
           "largest gRPC message accepted from an agent, in bytes",
           validate=lambda v: 1024 <= v <= 2**31 - 1, constraint="an integer in 1024..2147483647"),
    Option("record", "STEPWATCH_RECORD", str, "",
           "append every received step and allocator record to this JSONL file; empty disables"),
    Option("log_level", "STEPWATCH_LOG_LEVEL", _log_level, "INFO",
           "log level: " + ", ".join(_LOG_LEVELS)),
    # Detection and alerting (collector/detect, _alerting.py); detector keys: README "Detection".
    Option("detection", "STEPWATCH_DETECTION", parse_detection, DetectionConfig(),
           "detector settings: a YAML mapping (config file key 'detection:'), or YAML/JSON text"),
    Option("alertmanager_url", "STEPWATCH_ALERTMANAGER_URL", str, "",
           "Alertmanager base URL (http://host:9093) alerts are pushed to (v2 API); empty disables"),
    Option("alertmanager_timeout_s", "STEPWATCH_ALERTMANAGER_TIMEOUT_S", float, 5.0,
           "seconds per Alertmanager POST", validate=lambda v: 0 < v < float("inf"), constraint="a finite number > 0"),
    Option("alertmanager_retries", "STEPWATCH_ALERTMANAGER_RETRIES", int, 5,
           "retries (jittered exponential backoff) of a failed Alertmanager POST",
           validate=lambda v: 0 <= v <= 100, constraint="an integer in 0..100"),
    Option("windows_kept", "STEPWATCH_WINDOWS_KEPT", int, 5,
           "profiler window summaries kept per rank for /api/jobs/<job>/windows",
           validate=lambda v: 1 <= v <= 100, constraint="an integer in 1..100"),
    Option("window_top_k", "STEPWATCH_WINDOW_TOP_K", int, 5,
           "top kernels and ops per rank exported as stepwatch_window_top_*_seconds",
           validate=lambda v: 0 <= v <= 50, constraint="an integer in 0..50"),
)
OPTIONS_BY_NAME = {o.name: o for o in OPTIONS}


@dataclasses.dataclass(frozen=True)
class CollectorSettings:
    """Resolved, validated collector options (see :data:`OPTIONS` for meaning and units)."""

    grpc_listen: str = "0.0.0.0:7470"
    http_listen: str = "0.0.0.0:7471"
    agent_grace_s: float = 300.0
    auth_token: str = ""
    max_message_bytes: int = 4 * 1024 * 1024
    record: str = ""
    log_level: str = "INFO"
    detection: DetectionConfig = DetectionConfig()
    alertmanager_url: str = ""
    alertmanager_timeout_s: float = 5.0
    alertmanager_retries: int = 5
    windows_kept: int = 5
    window_top_k: int = 5


def read_config_file(path: str) -> dict[str, Any]:
    """Parse a YAML file holding a mapping of option names to values.

    An empty file is an empty mapping. Raises SettingsError naming the file when it cannot be
    read, is not YAML, is not a mapping, or holds a key that is not an option.
    """
    import yaml  # only needed when a file is given

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise SettingsError(f"config file {path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise SettingsError(f"config file {path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"config file {path}: expected a mapping of option names, "
                            f"got {type(data).__name__}")
    for key in data:
        if key not in OPTIONS_BY_NAME:
            raise SettingsError(f"config file {path}: unknown option {key!r}; "
                                f"known: {', '.join(sorted(OPTIONS_BY_NAME))}")
    return data


def load_settings(args: Optional[Mapping[str, Any]] = None, environ: Optional[Mapping[str, str]] = None,
                  config_file: Optional[str] = None) -> CollectorSettings:
    """Resolve all options; ``args`` entries that are None count as not given.

    ``environ`` defaults to ``os.environ``. Raises SettingsError on any bad input.
    """
    given = {k: v for k, v in (args or {}).items() if v is not None}
    file_values = read_config_file(config_file) if config_file else {}
    values = resolve(OPTIONS, given, os.environ if environ is None else environ, file_values)
    return CollectorSettings(**values)


def configure_logging(level: str) -> None:
    """Set up stderr logging for the collector process (called once by the CLI)."""
    logging.basicConfig(level=getattr(logging, level, logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
