"""What the collector holds: rank state per (job, rank) (``_state``), the process's own health
(``_health``), the capture requests it
issued and the traces they brought (``_trace_requests``), the store of uploaded trace files
(``_trace_store``), and how reads of the state give way to ingest (``_yield``)."""

from ._health import CollectorHealth
from ._ingest_counters import IngestCounters
from ._state import (CollectorState, Histogram, RankKey, RankState, SELF_BOUNDS_S, STEP_BUCKETS, WAIT_BUCKETS,
                     cumulative, mean_step_s, own, wait_ratio)
from ._trace_requests import TraceRequest
from ._trace_store import CHUNK_BYTES, TraceRejected, TraceStore, TraceStoreMetrics
from ._yield import PAUSE_EVERY_RANKS, LoadMeter, no_pause

__all__ = ["CHUNK_BYTES", "CollectorHealth", "CollectorState", "Histogram", "IngestCounters", "PAUSE_EVERY_RANKS",
           "RankKey", "RankState", "SELF_BOUNDS_S", "STEP_BUCKETS", "LoadMeter", "TraceRejected", "TraceRequest",
           "TraceStore", "TraceStoreMetrics", "WAIT_BUCKETS", "cumulative", "mean_step_s", "no_pause", "own",
           "wait_ratio"]
