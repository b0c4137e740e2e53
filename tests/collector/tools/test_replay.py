"""``stepwatch replay``: JSONL telemetry through the live detectors; clear errors naming the
line for bad input; ``--format json`` fields."""

from __future__ import annotations

import gzip
import json
import math
import pathlib
import random

import pytest

from stepwatch.collector.tools import main

T0 = 1_700_000_000.0
SMALL = "{warmup_steps: 5, drift: {bucket_s: 0.5, min_bucket_steps: 3, warmup_s: 2, settle_s: 6, critical_window_s: 2, warning_window_s: 3, info_window_s: 6, clear_s: 1, z: 3}}"


def step(s, t, dt, **extra):
    return json.dumps({"kind": "step", "job": "j", "rank": 0, "step": s, "time": t, "step_time_s": dt, **extra})


def slowed_job(path, steps=700, slow_from=400):
    rng, t, lines = random.Random(1), T0, []
    for s in range(1, steps + 1):
        dt = 0.035 * (1.2 if s >= slow_from else 1.0) * math.exp(rng.gauss(0, 0.01))
        t += dt
        lines.append(step(s, t, dt, samples=8, tokens=256))
    lines.append(json.dumps({"kind": "allocator", "job": "j", "rank": 0, "time": t, "allocated_bytes": 1,
                             "reserved_bytes": 2, "inactive_split_bytes": 0, "alloc_retries": 0, "ooms": 0,
                             "device_total_bytes": 10}))
    lines.append(json.dumps({"kind": "allocator", "job": "j", "rank": 0, "time": t + 1, "allocated_bytes": 1,
                             "reserved_bytes": 2, "inactive_split_bytes": 0, "alloc_retries": 0, "ooms": 1,
                             "device_total_bytes": 10}))
    path.write_text("\n".join(lines) + "\n\n")
    return path


def test_json_output_has_the_documented_fields(tmp_path, capsys):
    f = slowed_job(tmp_path / "rec.jsonl")
    assert main(["replay", str(f), "--detection", SMALL, "--format", "json"]) == 0
    *alerts, count = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert count == {"kind": "count", "episodes": len(alerts)}
    drift = [a for a in alerts if a["alertname"] == "StepwatchThroughputDrift"]
    assert drift and drift[0]["severity"] == "critical", alerts
    a = drift[0]
    assert {"alertname", "severity", "job", "rank", "step", "raised_step", "resolved_step", "time",
            "severity_history", "summary_at_raise", "summary"} <= set(a), a
    assert (a["job"], a["rank"]) == ("j", 0) and 390 <= a["step"] <= 420 and a["time"] > T0
    # raised within critical_window_s (2 s: ~48 steps of 42 ms) and a bucket (0.5 s) more
    assert a["step"] + 20 <= a["raised_step"] <= a["step"] + 60 and a["resolved_step"] is None
    assert [sev for _, sev in a["severity_history"]] == ["critical"]
    assert "+20" in a["summary"] or "+19" in a["summary"] or "+21" in a["summary"], a["summary"]
    assert [a["alertname"] for a in alerts if a["alertname"] == "StepwatchOOM"] == ["StepwatchOOM"]


def test_text_output_names_step_severity_and_alert(tmp_path, capsys):
    f = slowed_job(tmp_path / "rec.jsonl")
    assert main(["replay", str(f), "--detection", SMALL]) == 0
    out = capsys.readouterr().out
    assert "StepwatchThroughputDrift job=j rank=0  critical  onset step " in out, out
    assert ", raised at step " in out and out.endswith("2 alert episodes\n"), out


def test_every_episode_with_its_resolve_and_a_zero_count(tmp_path, capsys):
    """A slowdown that goes away and comes back: two episodes, each with raise and resolve
    steps; a healthy recording prints the count line alone."""
    rng, t, lines = random.Random(2), T0, []
    for s in range(1, 2601):
        slow = 700 <= s < 1000 or s >= 2300
        dt = 0.035 * (1.2 if slow else 1.0) * math.exp(rng.gauss(0, 0.01))
        t += dt
        lines.append(step(s, t, dt))
    f = tmp_path / "twice.jsonl"
    f.write_text("\n".join(lines) + "\n")
    assert main(["replay", str(f), "--detection", "{warmup_steps: 5, resolve_hold_s: 5, drift: "
                 "{bucket_s: 0.5, min_bucket_steps: 3, warmup_s: 2, settle_s: 6, critical_window_s: 2, "
                 "warning_window_s: 3, info_window_s: 6, clear_s: 1, z: 3, transient_s: 0}}",
                 "--format", "json"]) == 0
    *episodes, count = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert count["episodes"] == 2 == len(episodes)
    first, second = episodes
    assert 690 <= first["step"] <= 720 and 1000 < first["resolved_step"] < 1400
    assert 2290 <= second["step"] <= 2320 and second["resolved_step"] is None
    healthy = tmp_path / "healthy.jsonl"
    healthy.write_text("\n".join(step(s, T0 + s * 0.035, 0.035) for s in range(1, 500)) + "\n")
    assert main(["replay", str(healthy)]) == 0
    assert capsys.readouterr().out == "0 alert episodes\n"


def test_a_closed_pipe_is_no_traceback(tmp_path):
    f = slowed_job(tmp_path / "rec.jsonl")
    import subprocess
    import sys

    cmd = f"{sys.executable} -m stepwatch.collector.tools replay {f} --detection '{SMALL}' | head -c 10"
    run = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert len(run.stdout) == 10 and run.stderr == "", run.stderr


@pytest.mark.parametrize("line, message", [
    ("{not json", "line 2: not valid JSON"),
    ("[1, 2]", "line 2: expected a JSON object, got list"),
    ('{"kind": "window", "job": "j"}', "line 2: unknown kind 'window'; expected one of 'step', 'allocator'"),
    ('{"job": "j"}', "line 2: unknown kind None"),
    ('{"kind": "step", "job": "j", "rank": 0, "time": 1.0}', "line 2: step record lacks field(s) step, step_time_s"),
    ('{"kind": "allocator", "job": "j", "rank": 0, "time": 1.0, "allocated_bytes": 1}',
     "line 2: allocator record lacks field(s) reserved_bytes, inactive_split_bytes, alloc_retries, ooms, "
     "device_total_bytes"),
    ('{"kind": "step", "job": "j", "rank": "zero", "step": 1, "time": 1.0, "step_time_s": 0.1}',
     "line 2: field rank: expected an integer, got 'zero'"),
    ('{"kind": "step", "job": "j", "rank": 0, "step": 1, "time": null, "step_time_s": 0.1}',
     "line 2: field time: expected a number, got None"),
])
def test_bad_line_is_an_error_naming_the_line(tmp_path, capsys, line, message):
    f = tmp_path / "bad.jsonl"
    f.write_text(step(1, T0, 0.1) + "\n" + line + "\n" + step(2, T0 + 1, 0.1) + "\n")
    assert main(["replay", str(f)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("stepwatch replay: error: " + message), captured.err


def test_missing_file_and_bad_detection_option_are_errors(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "nope.jsonl")]) == 2
    assert "No such file" in capsys.readouterr().err
    f = slowed_job(tmp_path / "rec.jsonl", steps=10)
    assert main(["replay", str(f), "--detection", "{drift: {bucket_s: 0}}"]) == 2
    assert "detection.drift.bucket_s" in capsys.readouterr().err


REPLAY_DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "replay"


def _gpu_recording(tmp_path, name):
    """A recording made by tests/gpu/test_straggler_gpu.py on the lent H200 (gzipped here)."""
    path = tmp_path / name.replace(".gz", "")
    path.write_bytes(gzip.decompress((REPLAY_DATA / name).read_bytes()))
    return path


def test_recorded_gpu_windows_name_the_rank_whose_compute_is_slow(tmp_path, capsys):
    """Two DDP ranks sharing an H200, rank 1 with +8 ms of GEMMs in backward from step 150:
    replayed, the windows name rank 1 (step times alone cannot: both ranks ran 13.5 ms steps)."""
    f = _gpu_recording(tmp_path, "gpu_straggler_h200.jsonl.gz")
    assert main(["replay", str(f), "--format", "json"]) == 0
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    strag = [d for d in docs if d.get("alertname") == "StepwatchStragglerRank"]
    assert [d["rank"] for d in strag] == [1], docs
    assert strag[0]["step"] == 194, strag  # the first window after the change
    s = strag[0]["summary"]
    assert s.startswith("rank 1 compute 8.") and "ms/step vs median 0.5 ms of the other ranks" in s, s
    assert "cutlass" in strag[0]["diagnosis"] and "SM activity" in strag[0]["diagnosis"], strag


def test_recorded_balanced_gpu_job_raises_nothing(tmp_path, capsys):
    f = _gpu_recording(tmp_path, "gpu_balanced_h200.jsonl.gz")
    assert main(["replay", str(f), "--format", "json"]) == 0
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert docs == [{"kind": "count", "episodes": 0}], docs


def test_recorded_two_gpu_nccl_runs_name_rank_1_for_its_gemms_and_for_its_data_loader(tmp_path, capsys):
    """Two H200s, NCCL DDP (tests/gpu/test_nccl_straggler_gpu.py): +8 ms of GEMMs in rank 1's
    backward from step 150 is named from the windows (rank 0 idles before its all-reduce, so
    NCCL kernel time alone showed 1.5 ms of its 13.6 ms outside compute); a slowed data loader
    on rank 1 from its data-loader wait."""
    got = {}
    for variant in ("gemm", "dataloader"):
        f = _gpu_recording(tmp_path, f"nccl_{variant}_h200x2.jsonl.gz")
        assert main(["replay", str(f), "--format", "json"]) == 0
        docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        got[variant] = [d for d in docs if d.get("alertname") == "StepwatchStragglerRank"]
        assert [d["rank"] for d in got[variant]] == [1], docs
    assert got["gemm"][0]["step"] == 194 and "; in collectives" in got["gemm"][0]["summary"], got["gemm"]
    assert "data-loader wait" in got["dataloader"][0]["summary"], got["dataloader"]


def test_the_healthy_two_gpu_nccl_run_raises_nothing_and_gzip_is_read_as_is(capsys):
    """The healthy variant of the same two-H200 run (900 steps of ~8 ms): its step time rose
    ~10% for its last 140 steps (1.1 s), which a step-based detector once raised as drift; at
    the default settings (judged in seconds, armed after 3 minutes) nothing is raised; the
    recording is read gzipped, as stored."""
    assert main(["replay", str(REPLAY_DATA / "nccl_healthy_h200x2.jsonl.gz"), "--format", "json"]) == 0
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert docs == [{"kind": "count", "episodes": 0}], docs


def test_reach_prints_what_each_armed_rank_could_raise_at_the_end(capsys):
    """``--reach``: after the episodes, each armed rank's reach (the smallest sustained shift
    each severity raises at the job's own noise). On the real H200 2-GPU job whose speed
    wandered (tests/data/real/README.md: 20 s medians 43.8-49.3 ms) the medians alone read above
    +8% at every severity; its floor (each bucket's 10th percentile) held, so both ranks read the
    raise thresholds themselves (critical +8%, warning +4%), as text and as JSON; a recording too
    short to arm prints none."""
    real = REPLAY_DATA.parent / "real" / "h200x_2gpu_m.jsonl.gz"
    assert main(["replay", str(real), "--reach"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "0 alert episodes" and len(lines) == 3, lines
    assert all(ln.startswith("drift reach at the end  job=h2x_r1g23_1_default rank=") for ln in lines[:2]), lines
    assert main(["replay", str(real), "--reach", "--format", "json"]) == 0
    *reach, count = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert count == {"kind": "count", "episodes": 0}
    assert [r["rank"] for r in reach] == [0, 1] and all(r["kind"] == "reach" for r in reach), reach
    assert all(abs(r["reach"]["critical"] - 0.08) < 1e-9 and abs(r["reach"]["warning"] - 0.04) < 1e-9
               for r in reach), reach
    assert main(["replay", str(real), "--reach", "--format", "json", "--detection", "{drift: {floor_quantile: 0}}"]) == 0
    *medians, count = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert count["episodes"] == 0 and all(v > 0.08 for r in medians for v in r["reach"].values()), medians
    short = REPLAY_DATA.parent / "real" / "h100_1gpu_m_short.jsonl.gz"
    assert main(["replay", str(short), "--reach"]) == 0
    assert capsys.readouterr().out == "0 alert episodes\n"
