"""Prometheus export: the per-rank, per-job and window metric families (``_metrics``,
``_job_metrics``, ``_windows_metrics``), the text exposition (``_exposition``) over one read of
the state (``_rank_table``), the render process (``_fork_render``), the ``/metrics`` route
(``_scrape``), how a scrape gives way to ingest (``_scrape_pacing``), and the collector that
registers a component's declared families with the registry (``_declared``)."""

from ._declared import Declared
from ._exposition import render
from ._fork_render import ForkRender, available, cores
from ._metrics import RankMetrics, connected_families
from ._scrape import Scrape
from ._scrape_pacing import ScrapeYield, scrape_timeout
from ._windows_metrics import aligned_compute

__all__ = ["Declared", "ForkRender", "RankMetrics", "connected_families", "Scrape", "ScrapeYield", "aligned_compute", "available", "cores", "render",
           "scrape_timeout"]
