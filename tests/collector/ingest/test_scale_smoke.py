"""A scaled-down fleet: bench/collector_scale.py with 200 simulated ranks for 20 s against a
real collector (recorded agent batches over gRPC on loopback, scrapes in the second half).
Every batch must be acked and no stream may end in an error. Figures belong to the benchmark
(bench/results); this only checks that nothing is lost or refused at this size."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

BENCH = pathlib.Path(__file__).resolve().parents[3] / "bench" / "collector_scale.py"


def test_200_ranks_for_20_s_every_batch_acked_no_stream_error(tmp_path):
    out = tmp_path / "scale.json"
    run = subprocess.run([sys.executable, str(BENCH), "--ranks", "200", "--duration-s", "20", "--gen-procs", "1",
                          "--scrape-every-s", "2", "--out", str(out)], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["sent"] >= 200 * 3, row  # every rank sent several batches (period 5 s)
    assert row["acked"] == row["sent"], row
    assert row["errors"] == 0 and row["connect_failures"] == 0, row
    assert row["scrapes"] >= 3 and row["series"] > 200 * 20, row  # /metrics answered, per-rank series in it
