"""A GPU job script of this folder run once against its own recording collector."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from _procs import trainer_env

from stepwatch.collector.ingest._record import read_record

HERE = pathlib.Path(__file__).resolve().parent


def run_recorded_job(collector_factory, tmp_path, script: str, job: str, *args: str, **env_extra) -> tuple:
    """Run ``script`` (in tests/gpu) with the truth file first and ``args`` after it, the
    agent reporting as ``job`` to a collector recording to a file; it must exit 0. Returns
    ``(collector, truth dict, a function reading the recording's batches)``; read them once
    the collector has the steps it waits for."""
    record = tmp_path / f"{job}.jsonl"
    col = collector_factory("--record", str(record))
    truth_path = tmp_path / f"{job}.truth.json"
    run = subprocess.run([sys.executable, str(HERE / script), str(truth_path), *args],
                         env=trainer_env(tmp_path, col.grpc, job, **env_extra), capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]

    def batches() -> list:
        return [ev.batch for ev in read_record(record.read_text().splitlines()) if ev.kind == "batch"]

    return col, json.loads(truth_path.read_text()), batches
