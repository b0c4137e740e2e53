"""Trainer host memory stays flat over 1,000 profiler windows (new profiler each, gc after)."""

import json
import pathlib
import subprocess
import sys

JOB = pathlib.Path(__file__).with_name("window_rss_job.py")


def test_rss_flat_over_1000_windows():
    run = subprocess.run([sys.executable, str(JOB), "1000"], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["windows"] == 1000
    rss = dict(result["rss"])
    growth = rss[1000] - rss[100]
    # A leak of even 10 KiB per window would show as ~9 MiB here.
    assert growth < 4 << 20, f"trainer RSS grew {growth / 2**20:.1f} MiB over 900 windows: {rss}"
