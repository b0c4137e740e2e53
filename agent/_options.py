"""The agent's options: each has an argument name, an environment variable and a default."""

from __future__ import annotations

import os
import tempfile

from ._settings import Option, non_negative, parse_bool, parse_hostport, positive

__all__ = ["AGENT_OPTIONS"]


def _optional_int(value):
    return None if value is None or value == "" else int(value)


def _log_level(value):
    level = str(value).upper()
    if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
        raise ValueError("expected DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return level


def _activities(value):
    names = [a.strip().lower() for a in str(value).split(",") if a.strip()]
    if not names or set(names) - {"cpu", "cuda"}:
        raise ValueError("expected 'cpu,cuda', 'cuda' or 'cpu'")
    return ",".join(sorted(set(names)))


def _at_least(limit):
    return lambda value: value >= limit


AGENT_OPTIONS = (
    Option("collector", "STEPWATCH_COLLECTOR", parse_hostport, "localhost:7470",
           "gRPC address HOST:PORT of the stepwatch collector."),
    Option("job", "STEPWATCH_JOB", str, None,
           "Training job name (label training_job); default from torchrun/SLURM/Kubernetes "
           "environment, else the script name.", lambda v: bool(v.strip()), "a non-empty name"),
    Option("disable", "STEPWATCH_DISABLE", parse_bool, False,
           "Turn the agent off: attach() does nothing."),
    Option("samples_per_step", "STEPWATCH_SAMPLES_PER_STEP", _optional_int, None,
           "Samples per optimizer step (per rank), for throughput.", lambda v: v is None or v > 0,
           "a positive integer"),
    Option("tokens_per_step", "STEPWATCH_TOKENS_PER_STEP", _optional_int, None,
           "Tokens per optimizer step (per rank), for throughput.", lambda v: v is None or v > 0,
           "a positive integer"),
    Option("token", "STEPWATCH_TOKEN", str, "",
           "Shared secret sent as 'authorization: Bearer TOKEN' to the collector."),
    Option("memory_stats_interval_s", "STEPWATCH_MEMORY_STATS_INTERVAL_S", float, 1.0,
           "Seconds between torch.cuda.memory_stats() samples (at most 1 Hz).",
           _at_least(1.0), ">= 1.0"),
    Option("flush_interval_s", "STEPWATCH_FLUSH_INTERVAL_S", float, 1.0,
           "Seconds between batches sent by the sidecar.", positive, "> 0"),
    Option("ipc_flush_interval_s", "STEPWATCH_IPC_FLUSH_INTERVAL_S", float, 0.2,
           "Seconds the trainer buffers records before writing them to the sidecar pipe.",
           non_negative, ">= 0"),
    Option("nvml_interval_s", "STEPWATCH_NVML_INTERVAL_S", float, 1.0,
           "Seconds between NVML samples in the sidecar.", positive, "> 0"),
    Option("host_interval_s", "STEPWATCH_HOST_INTERVAL_S", float, 1.0,
           "Seconds between psutil samples of the trainer process.", positive, "> 0"),
    Option("buffer_records", "STEPWATCH_BUFFER_RECORDS", int, 10000,
           "Records the trainer holds when the sidecar pipe is full; oldest are dropped.",
           positive, "> 0"),
    Option("spool_dir", "STEPWATCH_SPOOL_DIR", str,
           os.path.join(tempfile.gettempdir(), "stepwatch-spool"),
           "Directory where unacknowledged batches wait on disk."),
    Option("spool_max_bytes", "STEPWATCH_SPOOL_MAX_BYTES", int, 256 << 20,
           "Disk bytes the spool may use per rank; oldest batches are dropped beyond.",
           positive, "> 0"),
    Option("reconnect_max_s", "STEPWATCH_RECONNECT_MAX_S", float, 30.0,
           "Upper bound of the jittered exponential reconnect backoff.", positive, "> 0"),
    Option("shutdown_timeout_s", "STEPWATCH_SHUTDOWN_TIMEOUT_S", float, 5.0,
           "Seconds the sidecar waits for the last acks when the trainer exits.",
           non_negative, ">= 0"),
    Option("windows", "STEPWATCH_WINDOWS", parse_bool, True,
           "Take torch.profiler windows on a schedule and report their summaries."),
    Option("window_interval_s", "STEPWATCH_WINDOW_INTERVAL_S", float, 60.0,
           "Target seconds between profiler windows; the overhead budget can only stretch it.",
           positive, "> 0"),
    Option("window_every_steps", "STEPWATCH_WINDOW_EVERY_STEPS", _optional_int, None,
           "Fixed steps between windows instead of window_interval_s (still budget-stretched).",
           lambda v: v is None or v > 0, "a positive integer"),
    Option("window_warmup_steps", "STEPWATCH_WINDOW_WARMUP_STEPS", int, 1,
           "Profiler warm-up steps before the recorded ones.", non_negative, ">= 0"),
    Option("window_active_steps", "STEPWATCH_WINDOW_ACTIVE_STEPS", int, 3,
           "Recorded steps per window.", positive, "> 0"),
    Option("window_activities", "STEPWATCH_WINDOW_ACTIVITIES", _activities, "cpu,cuda",
           "Profiler activities: 'cpu,cuda' (phases and top ops) or 'cuda' (cheaper)."),
    Option("overhead_budget", "STEPWATCH_OVERHEAD_BUDGET", float, 0.005,
           "Largest share of wall time the windows may cost (0.005 = 0.5%).",
           lambda v: 0 < v < 1, "between 0 and 1"),
    Option("window_backoff_s", "STEPWATCH_WINDOW_BACKOFF_S", float, 3 * 3600.0,
           "Pause after a window that saw no GPU events (another CUPTI subscriber).",
           non_negative, ">= 0"),
    Option("trace_dir", "STEPWATCH_TRACE_DIR", str,
           os.path.join(tempfile.gettempdir(), "stepwatch-traces"),
           "Where traces captured on command are kept (.json.gz)."),
    Option("trace_max_bytes", "STEPWATCH_TRACE_MAX_BYTES", int, 2 << 30,
           "Disk bytes kept in trace_dir per rank; oldest traces are removed beyond.",
           positive, "> 0"),
    Option("trace_max_files", "STEPWATCH_TRACE_MAX_FILES", int, 50,
           "Traces kept in trace_dir per rank; oldest are removed beyond.", positive, "> 0"),
    Option("window_top_k", "STEPWATCH_WINDOW_TOP_K", int, 10,
           "Kernels and operators kept per window summary.", positive, "> 0"),
    Option("log_level", "STEPWATCH_LOG_LEVEL", _log_level, "WARNING", "Agent log level."),
)
