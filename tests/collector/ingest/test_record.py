"""The record file's reader builds each Batch from its JSON directly (``parse_batch``), and must
give what ``json_format.ParseDict`` gives: on real recordings of every kind, on each JSON form
ParseDict accepts, and the same clear error, naming the line, for what it refuses."""

from __future__ import annotations

import json
import pathlib

import pytest
from google.protobuf import json_format

from stepwatch.collector.ingest._record import RecordError, _kwargs, event_line, parse_batch, read_record
from stepwatch.collector.tools.corpus import load
from stepwatch.proto.stepwatch.v1 import agent_pb2

REAL = pathlib.Path(__file__).resolve().parents[2] / "data" / "real"
# every kind of batch the corpus holds: H100 with scheduled windows and traces, 2 x H200 DDP with
# scheduled windows, an H200 job with phase times, GPM samples, allocator churn and alert windows
KINDS = ["h100_1gpu_m_short.jsonl.gz", "h200t_2gpu_m_sched_short.jsonl.gz", "diag/h200zo_1gpu_m_pulses.jsonl.gz",
         "diag/h200e_1gpu_m_empty_cache.jsonl.gz"]


def _same(a: agent_pb2.Batch, b: agent_pb2.Batch) -> bool:
    return a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


@pytest.mark.parametrize("name", KINDS)
def test_real_batches_are_built_as_parse_dict_builds_them(name):
    batches = [o["batch"] for o in load(str(REAL / name)) if o["kind"] == "batch"]
    fields = set()
    for d in batches:
        fast, slow = parse_batch(d), json_format.ParseDict(d, agent_pb2.Batch())
        assert _same(fast, slow), (name, d.get("seq"))
        _kwargs(agent_pb2.Batch.DESCRIPTOR, d)  # (built directly, not left to ParseDict: raises else)
        fields |= {f.name for f, _ in fast.ListFields()}
    assert {"steps", "stats"} <= fields, fields  # (the recordings hold what they are chosen for)
    if "sched" in name or name.startswith("h100_"):
        assert "windows" in fields, fields


def test_every_json_form_parse_dict_takes_gives_the_same_message():
    d = {"seq": "7", "steps": [{"step": 12, "endTimeS": 1.5, "duration_s": 1, "clock": "STEP_CLOCK_CUDA_EVENT",
                                "samples": "8"}],
         "gpu_samples": [{"time_s": "NaN", "power_watts": "Infinity", "sm_clock_hertz": 1.98e9}],
         "stats": {"window_skips": {"budget": "3"}}}
    fast, slow = parse_batch(d), json_format.ParseDict(d, agent_pb2.Batch())
    assert _same(fast, slow)  # ("NaN" and "Infinity" are left to ParseDict; the rest is built directly)
    assert fast.steps[0].step == 12 and fast.stats.window_skips["budget"] == 3


@pytest.mark.parametrize("bad, says", [
    ({"steps": [{"stepp": 1}]}, "stepp"),                      # no such field
    ({"steps": [{"step": "12x"}]}, "step"),                    # not an integer
    ({"steps": [{"step": 2 ** 64}]}, "step"),                  # out of range
    ({"steps": [{"clock": "STEP_CLOCK_SUNDIAL"}]}, "STEP_CLOCK_SUNDIAL"),  # no such enum value
    ({"steps": {"step": 1}}, "steps"),                         # a list expected
    ({"gpu_samples": [{"power_watts": "lots"}]}, "power_watts"),
])
def test_what_parse_dict_refuses_is_refused_with_its_line_named(bad, says):
    with pytest.raises(json_format.ParseError):
        json_format.ParseDict(bad, agent_pb2.Batch())
    with pytest.raises(json_format.ParseError) as err:
        parse_batch(bad)
    assert says in str(err.value)
    line = json.dumps({"v": 1, "kind": "batch", "time": 1.0, "job": "j", "rank": 0, "session": "s", "batch": bad})
    with pytest.raises(RecordError) as err:
        list(read_record(["", line]))
    assert str(err.value).startswith("line 2:") and says in str(err.value)


def test_a_recorded_batch_reads_back_equal():
    batch = agent_pb2.Batch(seq=3, steps=[agent_pb2.StepRecord(step=9, end_time_s=2.0, duration_s=0.04,
                                                               dataloader_wait_s=0.001)])
    hello = agent_pb2.Hello(job="j", rank=1, session_id="s")
    (ev,) = read_record([event_line("batch", 5.0, hello, batch)])
    assert ev.kind == "batch" and ev.time == 5.0 and ev.hello.rank == 1 and _same(ev.batch, batch)
