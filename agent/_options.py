"""The agent's settings: each is an ``attach()`` argument and an environment variable.

Declared once here with :mod:`stepwatch.core.settings`; the trainer resolves them
(argument > environment > default) and hands the result to its sidecar in the config line,
where the same declaration validates them again.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from stepwatch.core.contract import label_problem
from stepwatch.core.placement import parse_collectors
from stepwatch.core.support import user_tmp
from stepwatch.core.settings import (at_least, between, non_negative, option, parse_bool, parse_duration,
                       parse_log_level, parse_size, positive)

__all__ = ["AgentSettings"]


def _activities(value) -> str:
    names = [a.strip().lower() for a in str(value).split(",") if a.strip()]
    if not names or set(names) - {"cpu", "cuda"}:
        raise ValueError("expected 'cpu,cuda', 'cuda' or 'cpu'")
    return ",".join(sorted(set(names)))


_WINDOW_MODES = {"scheduled": "scheduled", "on_demand": "on_demand", "on-demand": "on_demand",
                 "off": "off"}


def _windows_mode(value) -> str:
    """'scheduled', 'on_demand' or 'off'; the booleans of earlier releases mean scheduled / off."""
    text = str(value).strip().lower()
    if text in _WINDOW_MODES:
        return _WINDOW_MODES[text]
    try:
        return "scheduled" if parse_bool(value) else "off"
    except ValueError:
        raise ValueError("expected 'on_demand', 'scheduled' or 'off' (or a boolean: scheduled / off)") from None


def _job(value) -> str:
    text = str(value)
    problem = label_problem(text)
    if problem:
        raise ValueError(problem)
    return text


@dataclasses.dataclass(frozen=True)
class AgentSettings:
    """Resolved agent settings (units in the names: ``_s`` seconds, ``_bytes`` bytes)."""

    collector: str = option(
        "localhost:7470", "gRPC address HOST:PORT of the stepwatch collector; several collector "
        "replicas: HOST:PORT entries separated by commas, or a name with one address per replica "
        "(a Kubernetes headless Service): each job goes to one replica by rendezvous hashing of "
        "its name, and on to the next one while its replica is down.",
        env="STEPWATCH_COLLECTOR", parse=parse_collectors)
    job: Optional[str] = option(
        None, "Training job name (label training_job); default from torchrun/SLURM/Kubernetes "
        "environment, else the script name.", env="STEPWATCH_JOB", parse=_job)
    disable: bool = option(False, "Turn the agent off: attach() does nothing.",
                           env="STEPWATCH_DISABLE")
    samples_per_step: Optional[int] = option(
        None, "Samples per optimizer step (per rank), for throughput.",
        env="STEPWATCH_SAMPLES_PER_STEP", check=positive())
    tokens_per_step: Optional[int] = option(
        None, "Tokens per optimizer step (per rank), for throughput.",
        env="STEPWATCH_TOKENS_PER_STEP", check=positive())
    token: str = option("", "Shared secret sent as 'authorization: Bearer TOKEN' to the collector.",
                        env="STEPWATCH_TOKEN", secret=True)
    tls: bool = option(False, "Connect to the collector over TLS (implied by tls_ca / tls_cert); "
                       "without tls_ca the system's CA roots are trusted.", env="STEPWATCH_TLS")
    tls_ca: str = option("", "PEM file of the CA that signed the collector's certificate.",
                         env="STEPWATCH_TLS_CA")
    tls_cert: str = option("", "PEM client certificate for mutual TLS (with tls_key).",
                           env="STEPWATCH_TLS_CERT")
    tls_key: str = option("", "PEM private key of tls_cert.", env="STEPWATCH_TLS_KEY")
    memory_stats_interval_s: float = option(
        1.0, "Seconds between torch.cuda.memory_stats() samples (at most 1 Hz).",
        env="STEPWATCH_MEMORY_STATS_INTERVAL_S", parse=parse_duration, check=at_least(1.0))
    flush_interval_s: float = option(
        1.0, "Seconds between batches sent by the sidecar.", env="STEPWATCH_FLUSH_INTERVAL_S",
        parse=parse_duration, check=positive())
    ipc_flush_interval_s: float = option(
        0.2, "Seconds the trainer buffers records before writing them to the sidecar pipe.",
        env="STEPWATCH_IPC_FLUSH_INTERVAL_S", parse=parse_duration, check=non_negative())
    nvml_interval_s: float = option(
        1.0, "Seconds between NVML samples in the sidecar.", env="STEPWATCH_NVML_INTERVAL_S",
        parse=parse_duration, check=positive())
    nvml_gpm: bool = option(
        True, "Sample NVML GPM device counters (SM/tensor/DRAM activity, PCIe/NVLink traffic; "
        "Hopper and newer) with the other NVML counters.", env="STEPWATCH_NVML_GPM")
    host_interval_s: float = option(
        1.0, "Seconds between psutil samples of the trainer process.",
        env="STEPWATCH_HOST_INTERVAL_S", parse=parse_duration, check=positive())
    buffer_records: int = option(
        10000, "Records the trainer holds when the sidecar pipe is full; oldest are dropped.",
        env="STEPWATCH_BUFFER_RECORDS", check=positive())
    spool_dir: str = option(
        user_tmp("spool"),
        "Directory where unacknowledged batches wait on disk (default: this user's own, made "
        "mode 0700, under the temp directory).", env="STEPWATCH_SPOOL_DIR")
    spool_max_bytes: int = option(
        256 << 20, "Disk bytes the spool may use per rank; oldest batches are dropped beyond.",
        env="STEPWATCH_SPOOL_MAX_BYTES", parse=parse_size, check=positive())
    reconnect_max_s: float = option(
        30.0, "Upper bound of the jittered exponential reconnect backoff.",
        env="STEPWATCH_RECONNECT_MAX_S", parse=parse_duration, check=positive())
    shutdown_timeout_s: float = option(
        5.0, "Seconds the sidecar waits for the last acks when the trainer exits.",
        env="STEPWATCH_SHUTDOWN_TIMEOUT_S", parse=parse_duration, check=non_negative())
    windows: str = option(
        "on_demand", "When profiler windows run: 'on_demand' (only when asked: a slowdown alert's "
        "window, `stepwatch trace`), 'scheduled' (also every window_interval_s), 'off' (never; "
        "captures asked for still run). Any profiler session, CPU-only included, leaves the rest "
        "of the process about 1% slower on a 46 ms H100 job (docs/agent.md), above the overhead "
        "budget, so a healthy job runs none by default.", env="STEPWATCH_WINDOWS",
        parse=_windows_mode)
    window_interval_s: float = option(
        60.0, "Target seconds between profiler windows; the overhead budget can only stretch it.",
        env="STEPWATCH_WINDOW_INTERVAL_S", parse=parse_duration, check=positive())
    window_every_steps: Optional[int] = option(
        None, "Fixed steps between windows instead of window_interval_s (still budget-stretched).",
        env="STEPWATCH_WINDOW_EVERY_STEPS", check=positive())
    window_warmup_steps: int = option(1, "Profiler warm-up steps before the recorded ones.",
                                      env="STEPWATCH_WINDOW_WARMUP_STEPS", check=non_negative())
    window_active_steps: int = option(3, "Recorded steps per window.",
                                      env="STEPWATCH_WINDOW_ACTIVE_STEPS", check=positive())
    window_activities: str = option(
        "cpu,cuda", "Profiler activities: 'cpu,cuda' (phases and top ops) or 'cuda' (cheaper).",
        env="STEPWATCH_WINDOW_ACTIVITIES", parse=_activities)
    window_export: bool = option(
        True, "Export each window's trace (natively, on the training thread at the window's last "
        "step) for the sidecar to summarise. Off: windows still run and are timed, their traces "
        "are dropped unwritten and nothing is analysed or sent: only for measuring the export's "
        "own share of a window's cost and after-effect (an A/B arm, bench/run_real_device.sh "
        "noexport). Captures asked for are always exported.", env="STEPWATCH_WINDOW_EXPORT")
    overhead_budget: float = option(
        0.005, "Largest share of wall time the windows may cost (0.005 = 0.5%).",
        env="STEPWATCH_OVERHEAD_BUDGET", check=(lambda v: 0 < v < 1, "between 0 and 1"))
    phase_budget: float = option(
        0.001, "Largest share of wall time the always-on phase times (data, forward, backward, "
        "sync, optimizer per sampled step) may cost (0.001 = 0.1%); 0 turns them off. The ranks of a "
        "job sample the same steps (at 0.9 of this rate): under data parallelism the job pays about "
        "one rank's samples.",
        env="STEPWATCH_PHASE_BUDGET", check=between(0.0, 0.1))
    capture_budget: float = option(
        0.02, "A capture asked by the collector (stepwatch trace, a slowdown alert) is refused, "
        "with the reason in its reply, while windows and captures have cost more than this share "
        "of the wall time since attach.", env="STEPWATCH_CAPTURE_BUDGET", check=between(0.0, 1.0))
    aftereffect_span_s: float = option(
        25.0, "After every profiler session the agent compares its wall time per step over two "
        "spans this long (from a fifth of it after the session closed) with up to 60 s before; "
        "a session that left both slower makes it drop that kind of session (at least 5 s: a "
        "span's figure is the median of its runs of 1 s or more).",
        env="STEPWATCH_AFTEREFFECT_SPAN_S", parse=parse_duration, check=at_least(5.0))
    aftereffect_threshold: float = option(
        0.02, "... slower by at least this share (or by the job's own wobble before the session, "
        "whichever is larger).", env="STEPWATCH_AFTEREFFECT_THRESHOLD", check=between(0.0, 1.0))
    window_first_after_s: float = option(
        60.0, "With scheduled windows, the first profiler session waits until the job has run this "
        "long, so the after-effect check judges it against the job's level before any profiler ran "
        "(a level a session leaves for the rest of the process is otherwise never seen; 0: at once).",
        env="STEPWATCH_WINDOW_FIRST_AFTER_S", parse=parse_duration, check=non_negative())
    window_backoff_s: float = option(
        3 * 3600.0, "Pause after a window that saw no GPU events (another CUPTI subscriber).",
        env="STEPWATCH_WINDOW_BACKOFF_S", parse=parse_duration, check=non_negative())
    trace_dir: str = option(
        user_tmp("traces"),
        "Where traces captured on command are kept (.json.gz; default: this user's own, made "
        "mode 0700, under the temp directory).", env="STEPWATCH_TRACE_DIR")
    trace_max_bytes: int = option(
        2 << 30, "Disk bytes kept in trace_dir per rank; oldest traces are removed beyond.",
        env="STEPWATCH_TRACE_MAX_BYTES", parse=parse_size, check=positive())
    trace_upload: bool = option(
        True, "Upload captured traces to the collector (kept there, served at /api/traces/<id>), "
        "so they outlive the node or pod.", env="STEPWATCH_TRACE_UPLOAD")
    trace_max_files: int = option(
        50, "Traces kept in trace_dir per rank; oldest are removed beyond.",
        env="STEPWATCH_TRACE_MAX_FILES", check=positive())
    window_top_k: int = option(10, "Kernels and operators kept per window summary.",
                               env="STEPWATCH_WINDOW_TOP_K", check=between(1, 1000))
    log_level: str = option("WARNING", "Agent log level.", env="STEPWATCH_LOG_LEVEL",
                            parse=parse_log_level)

    def __post_init__(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key: give both (mutual TLS) or neither")
        for name in ("tls_ca", "tls_cert", "tls_key"):
            path = getattr(self, name)
            if path and not os.path.isfile(path):
                raise ValueError(f"{name}: no such file {path!r}")
