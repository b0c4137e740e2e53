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
    Option("log_level", "STEPWATCH_LOG_LEVEL", _log_level, "WARNING", "Agent log level."),
)
