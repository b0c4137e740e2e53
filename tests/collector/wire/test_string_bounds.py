"""Every string an agent sends has a bound (collector/wire/_bounds.py), applied where it enters:
the table is checked field by field against the proto (a new string field without a bound
fails here), and the issue's attacks are replayed over real gRPC against a collector."""

from __future__ import annotations

import json

from google.protobuf.descriptor import FieldDescriptor
from prometheus_client.parser import text_string_to_metric_families

from collector_testlib import batch, hello, step
from stepwatch.collector.wire._bounds import MAP_ENTRIES, STRING_BOUNDS
from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc


def string_fields(desc, seen=None):
    """(type, field) of every string field and string map reachable from ``desc``."""
    seen = set() if seen is None else seen
    if desc.full_name in seen:
        return set()
    seen.add(desc.full_name)
    out = set()
    for f in desc.fields:
        if f.type == FieldDescriptor.TYPE_MESSAGE and f.message_type.GetOptions().map_entry:
            if any(x.type == FieldDescriptor.TYPE_STRING for x in f.message_type.fields):
                out.add((desc.name, f.name))
        elif f.type == FieldDescriptor.TYPE_STRING:
            out.add((desc.name, f.name))
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            out |= string_fields(f.message_type, seen)
    return out


def test_the_table_names_every_string_field_an_agent_sends():
    fields = string_fields(agent_pb2.AgentMessage.DESCRIPTOR)
    assert len(fields) >= 20
    assert fields == set(STRING_BOUNDS), (fields - set(STRING_BOUNDS), set(STRING_BOUNDS) - fields)
    assert all(0 < b <= 1024 for b in STRING_BOUNDS.values())
    assert set(MAP_ENTRIES) <= fields


def metric(text, name, **labels):
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_megabyte_strings_in_every_field_are_cut_on_entry_and_counted(start_collector):
    """8 ranks x 50 events with a 32 KB kind, 32 KB window activities, trace refs with 32 KB
    strings, a 32 KB GPU name and uuid in the batch (each batch under the 4 MB message bound):
    every answer stays small, nothing is refused, and the cuts are counted."""
    col = start_collector()
    big = "x" * (32 << 10)
    with col.channel() as chan:
        stub = agent_pb2_grpc.AgentServiceStub(chan)
        for rank in range(8):
            b = batch(1, steps=[step(1, phase=big)],
                      events=[agent_pb2.Event(time_s=1.0 + i, kind=big[:-i or None], message="m") for i in range(50)],
                      windows=[agent_pb2.WindowSummary(window_id=1, first_step=1, last_step=1, activities=big)],
                      traces=[agent_pb2.TraceRef(request_id=big, path=big, error=big, trace_id=big, upload_error=big)])
            b.batch.gpu.name, b.batch.gpu.uuid = big, big
            b.batch.stats.window_skips.update({f"{i}{big[:300]}": 1 for i in range(100)})
            acks = list(stub.Connect(iter([hello(job="big", rank=rank, session=f"s{rank}"), b]), timeout=30))
            assert [a.ack.seq for a in acks] == [1]
    sizes = {path: len(col.get(path)[2]) for path in ("/api/jobs", "/api/jobs?job=big", "/api/traces", "/metrics",
                                                      "/api/jobs/big/windows", "/api/alerts")}
    assert all(n < 400_000 for n in sizes.values()), sizes
    doc = json.loads(col.get("/api/jobs?job=big")[2])
    ranks = doc["jobs"][0]["ranks"]
    assert len(ranks) == 8 and all(len(e["kind"]) <= 64 for r in ranks for e in r["events"])
    text = col.get("/metrics")[2].decode()
    # per rank: 1 phase + 50 kinds + activities + 5 trace strings + name + uuid + 100 skip
    # keys (36 beyond 64 entries, 64 cut)
    assert metric(text, "stepwatch_collector_trimmed_total", what="string") == 8 * (1 + 50 + 1 + 5 + 2 + 100)
