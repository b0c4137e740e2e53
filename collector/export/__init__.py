"""Prometheus export: the per-rank, per-job and window metric families (``_metrics``,
``_job_metrics``, ``_windows_metrics``), the text exposition (``_exposition``) over one read of
the state (``_rank_table``), and the render process (``_fork_render``)."""
