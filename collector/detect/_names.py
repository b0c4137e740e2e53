"""The collector's alert names, declared once: every rule's conditions, the alert book, the why
and Alertmanager read these constants, never a literal of their own (the Prometheus rules in
deploy/ name their own alerts)."""

from __future__ import annotations

__all__ = ["THROUGHPUT_DRIFT", "PROFILER_OVERHEAD", "STRAGGLER_RANK", "GPU_THROTTLED", "JOB_STALLED", "AGENT_GONE",
           "DUPLICATE_RANK", "AGENT_RESTART_CAP", "ALLOC_RETRIES", "ALLOCATOR_FRAGMENTATION", "GPU_MEMORY_LEAK",
           "HOST_MEMORY_LEAK", "MEMORY_EXHAUSTION_FORECAST", "OOM", "RUN_REGRESSION", "ALERT_NAMES"]

THROUGHPUT_DRIFT = "StepwatchThroughputDrift"
PROFILER_OVERHEAD = "StepwatchProfilerOverhead"
STRAGGLER_RANK = "StepwatchStragglerRank"
GPU_THROTTLED = "StepwatchGpuThrottled"
JOB_STALLED = "StepwatchJobStalled"
AGENT_GONE = "StepwatchAgentGone"
DUPLICATE_RANK = "StepwatchDuplicateRank"
AGENT_RESTART_CAP = "StepwatchAgentRestartCap"
ALLOC_RETRIES = "StepwatchAllocRetries"
ALLOCATOR_FRAGMENTATION = "StepwatchAllocatorFragmentation"
GPU_MEMORY_LEAK = "StepwatchGpuMemoryLeak"
HOST_MEMORY_LEAK = "StepwatchHostMemoryLeak"
MEMORY_EXHAUSTION_FORECAST = "StepwatchMemoryExhaustionForecast"
OOM = "StepwatchOOM"
RUN_REGRESSION = "StepwatchRunRegression"

ALERT_NAMES = (THROUGHPUT_DRIFT, PROFILER_OVERHEAD, STRAGGLER_RANK, GPU_THROTTLED, JOB_STALLED, AGENT_GONE,
               DUPLICATE_RANK, AGENT_RESTART_CAP, ALLOC_RETRIES, ALLOCATOR_FRAGMENTATION, GPU_MEMORY_LEAK,
               HOST_MEMORY_LEAK, MEMORY_EXHAUSTION_FORECAST, OOM, RUN_REGRESSION)
