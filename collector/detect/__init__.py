"""Detection: pure, clock-injected rules fed each rank's steps, phase times, allocator, NVML and
host samples as columns (:mod:`._rule`). Live ingest and ``stepwatch replay`` drive the same
:class:`DetectionEngine`. What other rooms use is exported here; its modules are private."""

from ._config import (DetectionConfig, DriftConfig, GpuConfig, LivenessConfig, MemoryConfig, StragglerConfig,
                      RunsConfig, describe_options, parse_detection)
from ._drift import DriftDetector
from ._drift_pair import RankDrift
from ._engine import RULES, TICK_SLICE, Columns, DetectionEngine
from ._rule import Context, Phases, Rule, Steps
from ._run_record import RunComparison, RunIdentity
from ._run_store import RunStore
from ._persist import DriftStore
from ._names import *  # noqa: F401,F403  (the alert names, declared once)
from ._names import __all__ as _NAMES
from ._straggler import GPU_BUSIER, OWN_WORK, StragglerDetector
from ._types import (CRITICAL, SEVERITIES, WARNING, AllocatorPoint, Condition, DriftView, GpuPoint, HostPoint, Kind,
                     WindowPoint, last_max_index, median)

__all__ = ["DetectionConfig", "DriftConfig", "StragglerConfig", "MemoryConfig", "GpuConfig", "LivenessConfig",
           "RunsConfig", "RunIdentity", "RunComparison", "RunStore",
           "parse_detection", "describe_options", "DetectionEngine", "RULES", "Rule", "Context", "Steps", "Phases",
           "Columns", "DriftDetector", "RankDrift", "StragglerDetector",
           "Condition", "DriftView", "Kind", "AllocatorPoint", "GpuPoint", "HostPoint", "WindowPoint", "WARNING", "CRITICAL", "SEVERITIES",
           "TICK_SLICE", "DriftStore", "GPU_BUSIER", "OWN_WORK", "last_max_index", "median",
           *_NAMES]
