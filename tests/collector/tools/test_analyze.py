"""``stepwatch analyze``: the sidecar's analysis on a trace file, and the diff of two."""

from __future__ import annotations

import json
import pathlib

import pytest
from google.protobuf import json_format

from stepwatch.agent.analysis import summarize
from stepwatch.collector.tools import main

TRACES = pathlib.Path(__file__).resolve().parents[2] / "data" / "traces"


def without_timing(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "analysis_s"}  # wall seconds of the analysis


@pytest.mark.parametrize("name", sorted(p.name for p in TRACES.glob("*.json.gz")))
def test_json_is_the_sidecar_summary(name, capsys):
    assert main(["analyze", str(TRACES / name), "--format", "json"]) == 0
    (got,) = json.loads(capsys.readouterr().out)["summaries"]
    want = json_format.MessageToDict(summarize(str(TRACES / name)), preserving_proto_field_name=True)
    assert without_timing(got) == without_timing(want)


def test_text_shows_phases_busy_and_top_lists(capsys):
    path = str(TRACES / "cpu_cuda_2gpu_rank0.json.gz")
    assert main(["analyze", path, "--top-k", "3"]) == 0
    out = capsys.readouterr().out
    s = summarize(path, top_k=3)
    assert f"step {s.breakdown.step_time_s * 1e3:.2f} ms: forward {s.breakdown.forward_s * 1e3:.2f} ms" in out
    assert f"GPU busy {s.gpu_busy_ratio:.1%}" in out and "top kernels:" in out and "top ops:" in out
    assert out.count("ms  ") >= 6  # 3 kernels + 3 ops


def test_two_traces_rank_what_changed(capsys):
    one, two = str(TRACES / "cpu_cuda_rank0.json.gz"), str(TRACES / "cpu_cuda_2gpu_rank0.json.gz")
    assert main(["analyze", one, two, "--format", "json"]) == 0
    changes = json.loads(capsys.readouterr().out)["changes"]
    first = changes["contributors"][0]
    assert first["name"] == "communication" and first["delta_ms_per_step"] > 1.0
    assert first["detail"].startswith("ncclDevKernel_AllReduce")  # the new NCCL kernel
    assert main(["analyze", one, two]) == 0
    assert "communication +" in capsys.readouterr().out.splitlines()[-1]


def test_unreadable_or_foreign_input_exits_2(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "missing.json")]) == 2
    assert "No such file" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a trace"}')
    assert main(["analyze", str(bad)]) == 2
    assert capsys.readouterr().err.startswith("stepwatch analyze: error: ")
