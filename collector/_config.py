"""Collector settings, declared once with :mod:`stepwatch.core.settings`.

Precedence is command-line flag > environment > YAML config file > default. Every failure
(bad value, unknown key, unreadable or non-mapping file) raises :class:`SettingsError` with a
message that names the option or the file. Sub-configs (``detection``) are sections: passed
whole to the part that uses them.
"""

from __future__ import annotations

import dataclasses
import logging
import ipaddress
import os
from typing import Any, Mapping, Optional

from stepwatch.core.settings import (SettingsError, between, load, non_negative, option, parse_duration,
                                      parse_hostport, parse_log_level, parse_size, read_yaml_file,
                                      section)

from .detect import DetectionConfig

__all__ = ["CollectorSettings", "SettingsError", "load_settings", "read_config_file",
           "configure_logging"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (as in HOST:PORT; brackets allowed) only listens on loopback."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name, or "" / 0.0.0.0 / :: (every interface)


def _token(text: Any) -> str:
    value = str(text).strip()
    if any(c.isspace() for c in value):
        raise ValueError("the token must not contain white space")
    return value


def _one_of(*values: str):
    """A parser of one of ``values`` (case and surrounding space ignored)."""
    def parse(raw: Any) -> str:
        value = str(raw).strip().lower()
        if value not in values:
            raise ValueError(f"expected {', '.join(values[:-1])} or {values[-1]}")
        return value
    return parse


_per_rank_mode = _one_of("full", "summary", "off")


def _render_mode(raw: Any) -> str:
    value = _one_of("auto", "process", "thread")(raw)
    if value == "process" and not hasattr(os, "fork"):
        raise ValueError("process needs fork(), which this platform lacks; use thread")
    return value


def _finite_positive() -> tuple:
    return (lambda v: 0 < v < float("inf"), "a finite number > 0")


@dataclasses.dataclass(frozen=True)
class CollectorSettings:
    """Resolved, validated collector settings (units in the names)."""

    grpc_listen: str = option(
        "127.0.0.1:7470", "HOST:PORT the gRPC ingest (agents) listens on; port 0 picks a free port. "
        "A non-loopback address needs auth_token or tls_client_ca (or insecure)",
        env="STEPWATCH_GRPC_LISTEN", parse=parse_hostport)
    http_listen: str = option(
        "127.0.0.1:7471", "HOST:PORT of the HTTP server (/metrics, /healthz, /api/jobs); "
        "port 0 picks a free port", env="STEPWATCH_HTTP_LISTEN", parse=parse_hostport)
    agent_grace_s: float = option(
        300.0, "seconds a disconnected rank's series are kept before they expire",
        env="STEPWATCH_AGENT_GRACE_S", parse=parse_duration, check=_finite_positive())
    auth_token: str = option(
        "", "shared token agents must send as 'authorization: Bearer <token>'; empty disables "
        "auth", env="STEPWATCH_AUTH_TOKEN", parse=_token, secret=True)
    http_token: str = option(
        "", "token /metrics and /api need ('authorization: Bearer <token>', or basic auth with it "
        "as the password, as Prometheus and browsers send); /healthz stays open; empty: open",
        env="STEPWATCH_HTTP_TOKEN", parse=_token, secret=True)
    control_token: str = option(
        "", "token ControlService callers (stepwatch trace: Capture, DownloadTrace) must send; "
        "without it only callers on loopback may capture", env="STEPWATCH_CONTROL_TOKEN",
        parse=_token, secret=True)
    capture_every_s: float = option(
        60.0, "at most one ControlService.Capture per job this often (a capture slows every rank)",
        env="STEPWATCH_CAPTURE_EVERY_S", parse=parse_duration, check=non_negative())
    insecure: bool = option(
        False, "allow a non-loopback grpc_listen without auth_token or tls_client_ca (anyone who "
        "reaches the port could send telemetry), and a non-loopback http_listen without "
        "http_token or tls_client_ca (anyone could read it)", env="STEPWATCH_INSECURE")
    tls_cert: str = option(
        "", "PEM server certificate: gRPC and HTTP then serve TLS only (with tls_key)",
        env="STEPWATCH_TLS_CERT")
    tls_key: str = option("", "PEM private key of tls_cert", env="STEPWATCH_TLS_KEY")
    tls_client_ca: str = option(
        "", "PEM CA: agents (gRPC) and HTTP clients must present a certificate it signed (mutual "
        "TLS); needs tls_cert", env="STEPWATCH_TLS_CLIENT_CA")
    max_message_bytes: int = option(
        4 * 1024 * 1024, "largest gRPC message accepted from an agent, in bytes",
        env="STEPWATCH_MAX_MESSAGE_BYTES", parse=parse_size, check=between(1024, 2**31 - 1))
    max_batches_per_s: float = option(
        500.0, "agent messages per second this collector plans for: with more agents connected "
        "than that (each sends a batch a second by default), acknowledgements ask every agent to "
        "send a batch only every (connected agents / this) seconds, at most 30; the collector's "
        "cost is per message (10,000 agents on one core are acked within 250 ms at 500, not at "
        "1,000, while scraped). 0: never ask",
        env="STEPWATCH_MAX_BATCHES_PER_S", check=non_negative())
    gc_full_every_s: float = option(
        3600.0, "seconds between full garbage collections of the collector's long-lived state: "
        "in between it is frozen out of Python's collections (at 10,000 ranks each full one "
        "stops ingest and acks for over a second); 0: Python's own schedule",
        env="STEPWATCH_GC_FULL_EVERY_S", parse=parse_duration, check=non_negative())
    gil_switch_interval_s: float = option(
        0.0001, "the collector process's Python thread switch interval (sys.setswitchinterval): "
        "gRPC's poller thread hands every event to the event loop under the GIL, and at the "
        "default 0.005 s a busy loop let events wait; at 10,000 agents acks came 0.5 s later "
        "(median) with it. 0: Python's default", env="STEPWATCH_GIL_SWITCH_INTERVAL_S",
        check=between(0.0, 1.0))
    http_nice: int = option(
        10, "niceness added to the thread that builds /metrics and the fleet-sized /api answers "
        "(Linux; a forked /metrics child inherits it): on a saturated core the event loop (acks, "
        "/healthz) runs ahead of it; 0: as the process", env="STEPWATCH_HTTP_NICE",
        check=between(0, 19))
    max_jobs: int = option(
        1000, "jobs held at once; an agent of a further job is refused (RESOURCE_EXHAUSTED, "
        "counted as streams_rejected{reason=\"too_many_jobs\"})", env="STEPWATCH_MAX_JOBS",
        check=between(1, 10**7))
    max_ranks_per_job: int = option(
        16384, "ranks held per job; a further rank is refused (reason too_many_ranks)",
        env="STEPWATCH_MAX_RANKS_PER_JOB", check=between(1, 10**7))
    record: str = option(
        "", "append every applied agent batch to this file (one JSON line per batch, the wire "
        "schema; `stepwatch replay` reads it); empty disables", env="STEPWATCH_RECORD")
    log_level: str = option("INFO", "log level: DEBUG, INFO, WARNING, ERROR, CRITICAL",
                            env="STEPWATCH_LOG_LEVEL", parse=parse_log_level)
    detection: DetectionConfig = section(
        DetectionConfig, "detector settings: a YAML mapping (config file key 'detection:'), "
        "or YAML/JSON text", env="STEPWATCH_DETECTION")
    alertmanager_url: str = option(
        "", "Alertmanager base URL (http://host:9093) alerts are pushed to (v2 API); empty "
        "disables", env="STEPWATCH_ALERTMANAGER_URL")
    alertmanager_timeout_s: float = option(
        5.0, "seconds per Alertmanager POST", env="STEPWATCH_ALERTMANAGER_TIMEOUT_S",
        parse=parse_duration, check=_finite_positive())
    alertmanager_retries: int = option(
        5, "retries (jittered exponential backoff) of a failed Alertmanager POST",
        env="STEPWATCH_ALERTMANAGER_RETRIES", check=between(0, 100))
    windows_kept: int = option(
        5, "profiler window summaries kept per rank for /api/jobs/<job>/windows",
        env="STEPWATCH_WINDOWS_KEPT", check=between(1, 100))
    metrics_per_rank: str = option(
        "summary", "per-rank series on /metrics: full (every series, ~110-150 per GPU rank), summary "
        "(at most 34 per rank; per-job aggregates carry the distributions) or off (per-job "
        "aggregates only); /api has every rank's detail in any mode",
        env="STEPWATCH_METRICS_PER_RANK", parse=_per_rank_mode)
    metrics_render: str = option(
        "auto", "where /metrics is rendered: process (a forked child on another core, in parallel "
        "with ingest; needs memory for the pages it copies), thread (the HTTP worker thread, "
        "sharing the GIL with ingest and giving way to it) or auto (process when the collector "
        "may use 2 or more cores: CPU affinity and cgroup quota; else thread); a child that "
        "fails falls back to the thread", env="STEPWATCH_METRICS_RENDER", parse=_render_mode)
    metrics_top_k: int = option(
        5, "top kernels and ops per rank exported as stepwatch_window_top_*_seconds",
        env="STEPWATCH_METRICS_TOP_K", check=between(0, 50))
    trace_store_dir: str = option(
        "auto",
        "directory uploaded traces are kept in (served at /api/traces/<id>); auto: a private "
        "directory of this collector's own (mode 0700) under the temp directory, removed when it "
        "stops; empty: refuse uploads", env="STEPWATCH_TRACE_STORE_DIR")
    state_dir: str = option(
        "", "directory where detection keeps each rank's settled level, noise and open drift "
        "episode (SQLite), so a restarted collector, or a replica that shares it, goes on where "
        "it was instead of warming up again; empty: kept in memory only",
        env="STEPWATCH_STATE_DIR")
    trace_store_max_bytes: int = option(
        2 << 30, "bytes of uploaded traces kept in all; the oldest are removed beyond",
        env="STEPWATCH_TRACE_STORE_MAX_BYTES", parse=parse_size, check=between(1 << 20, 1 << 50))
    trace_upload_max_bytes: int = option(
        256 << 20, "largest single trace accepted from an agent, in bytes (gzip)",
        env="STEPWATCH_TRACE_UPLOAD_MAX_BYTES", parse=parse_size, check=between(1024, 1 << 40))

    def __post_init__(self) -> None:
        host = self.grpc_listen.rpartition(":")[0]
        if not (is_loopback(host) or self.auth_token or self.tls_client_ca or self.insecure):
            raise ValueError(f"grpc_listen: {self.grpc_listen} is reachable from other hosts, and no "
                             "credential is set: set auth_token (STEPWATCH_AUTH_TOKEN) or "
                             "tls_client_ca, or pass --insecure to accept anyone who reaches the port")
        http_host = self.http_listen.rpartition(":")[0]
        if self.http_listen and not (is_loopback(http_host) or self.http_token or self.tls_client_ca
                                     or self.insecure):
            raise ValueError(f"http_listen: {self.http_listen} is reachable from other hosts, and no "
                             "credential is set: /metrics, /api and the page (jobs, alerts, traces) "
                             "would be open to anyone: set http_token (STEPWATCH_HTTP_TOKEN; Prometheus "
                             "scrapes with it as a bearer token) or tls_client_ca, or pass --insecure")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key: give both or neither")
        if self.tls_client_ca and not self.tls_cert:
            raise ValueError("tls_client_ca: mutual TLS needs tls_cert and tls_key as well")
        for name in ("tls_cert", "tls_key", "tls_client_ca"):
            path = getattr(self, name)
            if path and not os.path.isfile(path):
                raise ValueError(f"{name}: no such file {path!r}")


def read_config_file(path: str) -> dict[str, Any]:
    """The YAML config file as a mapping; SettingsError naming the file when it cannot be
    read, is not YAML, is not a mapping, or holds a key that is not an option."""
    data = read_yaml_file(path)
    known = {f.name for f in dataclasses.fields(CollectorSettings)}
    for key in data:
        if key not in known:
            raise SettingsError(f"config file {path}: unknown option {key!r}; "
                                f"known: {', '.join(sorted(known))}")
    return data


def load_settings(args: Optional[Mapping[str, Any]] = None, environ: Optional[Mapping[str, str]] = None,
                  config_file: Optional[str] = None) -> CollectorSettings:
    """Resolve all settings; ``args`` entries that are None count as not given.

    ``environ`` defaults to ``os.environ``. Raises SettingsError on any bad input.
    """
    file_values = read_config_file(config_file) if config_file else {}
    environ = dict(os.environ if environ is None else environ)
    if "STEPWATCH_AUTH_TOKEN" not in environ and "STEPWATCH_TOKEN" in environ:
        # One shared env file for agents and collector: the agents' name works here too.
        environ["STEPWATCH_AUTH_TOKEN"] = environ["STEPWATCH_TOKEN"]
    return load(CollectorSettings, args, environ,
                file_values, f"config file {config_file}" if config_file else "config file")


# C0 and C1 controls (U+0085 among them), the Unicode line and paragraph separators and the
# bidirectional marks, embeddings, overrides and isolates: every character a log viewer may
# split a line on or show reordered
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7f, 0xa0)]}
_CONTROL.update({c: f"\\u{c:04x}" for c in [0x061c, 0x200e, 0x200f, 0x2028, 0x2029, *range(0x202a, 0x202f),
                                              *range(0x2066, 0x206a)]})
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


class EscapingFormatter(logging.Formatter):
    """One log record, one line: control characters in the message (job names, hosts, session
    ids and other strings an agent sent) are written escaped (``\\n``, ``\\x1b``), so a peer
    cannot forge or split collector log lines. Tracebacks keep their own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return super().formatMessage(record).translate(_CONTROL)


def configure_logging(level: str) -> None:
    """Set up stderr logging for the collector process (called once by the CLI)."""
    handler = logging.StreamHandler()
    handler.setFormatter(EscapingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level, logging.INFO), handlers=[handler])
