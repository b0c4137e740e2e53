"""On a CUDA machine: every dashboard panel marked [feeds: cuda] (and [feeds: any]) returns data
when a real Prometheus scrapes a collector fed by a CUDA training job. Needs the prometheus and
prometheus-alertmanager binaries as well (carry them to the GPU machine); skipped otherwise."""

from __future__ import annotations

import pathlib
import shutil
import sys
import time

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
              pytest.mark.skipif(not (shutil.which("prometheus") and shutil.which("prometheus-alertmanager")),
                                 reason="needs the prometheus and prometheus-alertmanager binaries")]

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "deploy"))
from _procs import run_trainer, trainer_env  # noqa: E402
from dashboard_check import check_panels  # noqa: E402


def test_every_gpu_panel_has_data(tmp_path):
    from stepwatch.collector.tools.stack import LocalStack

    # Per-rank series full: every panel must have data (tests/deploy checks the other modes on CPU).
    stack = LocalStack(str(tmp_path / "stack"), scrape_interval="1s",
                       collector_args=["--metrics-per-rank", "full"]).start()
    try:
        start = time.time()
        # Profiler windows every 32 steps feed the window panels (the first one is discarded).
        env = trainer_env(tmp_path, stack.collector_grpc, "gpupanels", STEPWATCH_WINDOWS="scheduled", STEPWATCH_WINDOW_EVERY_STEPS=32,
                          STEPWATCH_OVERHEAD_BUDGET=0.5)
        # Long enough for several 1 s NVML and allocator samples and several windows to be scraped.
        run_trainer(env, "--device", "cuda", "--steps", "400", "--step-sleep-s", "0.02", timeout=240)
        time.sleep(3)
        problems = check_panels(stack.prometheus_url, "gpupanels", start, time.time(), required={"any", "cuda"})
        assert not problems, "\n".join(problems)
    finally:
        stack.stop()
