"""Per-job aggregates across ranks, exported in every per-rank mode.

Merged step-time and data-loader-wait histograms, ranks connected, min/median/max across ranks
of recent step time, wait ratio, GPU utilisation, SM activity and reserved memory, the slowest
rank and the job's compute skew. Read from the scrape's :class:`~._rank_table.RankTable`, a
job's ranks being one slice of every column.
"""

from __future__ import annotations

import statistics
from typing import Callable

from ._exposition import Family, labels_text
from ._rank_table import RankTable
from ..state import STEP_BUCKETS, WAIT_BUCKETS, Histogram
from ._windows_metrics import skew_ratio
from ..state import PAUSE_EVERY_RANKS, no_pause

__all__ = ["job_families"]

_STATS3 = ("min", "median", "max")

# (name, HELP, each rank's value or None, from the table)
_JOB_SPREAD: tuple[tuple[str, str, Callable[[RankTable], list]], ...] = (
    ("stepwatch_job_rank_step_seconds", "Mean step time over each rank's last 100 steps: min, median and max "
     "across the job's ranks.", RankTable.recent_step_s),
    ("stepwatch_job_rank_dataloader_wait_ratio", "Data-loader wait share of each rank's last 100 steps: min, median "
     "and max across the job's ranks.", RankTable.wait_ratio),
    ("stepwatch_job_gpu_utilization_ratio", "GPU utilisation (NVML): min, median and max across the job's ranks.",
     lambda t: t.field("gpu_sample", "utilization_ratio")),
    ("stepwatch_job_gpu_sm_active_ratio", "SM activity (GPM): min, median and max across the job's ranks.",
     lambda t: t.field("gpu_sample", "sm_active_ratio")),
    ("stepwatch_job_allocator_reserved_bytes", "CUDA allocator reserved bytes: min, median and max across the "
     "job's ranks.", lambda t: t.field("allocator", "reserved_bytes")),
)


def job_families(t: RankTable, pause: Callable[[], None] = no_pause) -> list[Family]:
    """The per-job families of the table's ranks; ``pause`` after every PAUSE_EVERY_RANKS
    ranks' jobs (a scrape's yield)."""
    count = Family("stepwatch_job_ranks", "Ranks of the job the collector holds, by state (connected, "
                   "disconnected: in the grace period).", "gauge")
    dur = Family("stepwatch_job_step_duration_seconds", "Duration of training steps of all the job's ranks.",
                 "histogram")
    wait = Family("stepwatch_job_dataloader_wait_seconds", "Seconds per step waiting for the DataLoader, all the "
                  "job's ranks.", "histogram")
    spread = [Family(name, doc, "gauge") for name, doc, _ in _JOB_SPREAD]
    skew = Family("stepwatch_job_rank_skew_ratio", "Slowest rank's compute per step / the median rank's, in the "
                  "job's latest profiler windows (1 = balanced).", "gauge")
    slowest = Family("stepwatch_job_slowest_rank", "The rank with the longest mean step time over its last "
                     "100 steps.", "gauge")
    columns = [value(t) for _, _, value in _JOB_SPREAD]
    recent = columns[0]
    hists = ((dur, STEP_BUCKETS, t.step_counts, t.step_sum, t.step_count),
             (wait, WAIT_BUCKETS, t.wait_counts, t.wait_sum, t.wait_count))
    done = 0
    for job, a, b in t.jobs():
        done += b - a
        if done >= PAUSE_EVERY_RANKS:
            done = 0
            pause()
        labels = labels_text(("training_job",), (job,))
        up = sum(1 for n in t.streams[a:b] if n > 0)
        count.add(labels, up, 'state="connected"')
        count.add(labels, b - a - up, 'state="disconnected"')
        for fam, bounds, counts, sums, totals in hists:
            merged = Histogram.merged(bounds, counts[a:b], sums[a:b], totals[a:b])
            if merged.count:
                fam.add_histogram(labels, merged.cumulative(), merged.sum)
        for fam, col in zip(spread, columns):
            vals = [v for v in col[a:b] if v is not None]
            if vals:
                for stat, v in zip(_STATS3, (min(vals), statistics.median(vals), max(vals))):
                    fam.add(labels, v, f'stat="{stat}"')
        steps = [(s, rank) for s, rank in zip(recent[a:b], t.rank[a:b]) if s is not None]
        if steps:
            slowest.add(labels, max(steps)[1])
        ratio = skew_ratio(zip(t.rank[a:b], t.windows[a:b]))
        if ratio is not None:
            skew.add(labels, ratio)
    return [count, dur, wait, *spread, skew, slowest]
