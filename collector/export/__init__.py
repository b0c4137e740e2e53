"""Prometheus export: the per-rank, per-job and window metric families (``_metrics``,
``_job_metrics``, ``_windows_metrics``), the text exposition (``_exposition``) over one read of
the state (``_rank_table``), and the render process (``_fork_render``)."""

from ._exposition import render
from ._fork_render import ForkRender, available, cores
from ._metrics import RankMetrics
from ._windows_metrics import aligned_compute

__all__ = ["ForkRender", "RankMetrics", "aligned_compute", "available", "cores", "render"]
