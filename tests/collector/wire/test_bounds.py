"""The collector's bounds, each configurable and counted when hit: jobs, ranks per job, label
values, event messages, window lists (real gRPC on loopback, real scrapes)."""

from __future__ import annotations

import json
import time

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from collector_testlib import batch, hello, step
from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc


def converse(chan, messages):
    return list(agent_pb2_grpc.AgentServiceStub(chan).Connect(iter(messages), timeout=10))


def value(text, name, **labels):
    found = [s.value for fam in text_string_to_metric_families(text) for s in fam.samples
             if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    return found[0] if found else None


def test_jobs_beyond_max_jobs_are_refused_and_counted_but_held_ranks_reconnect(start_collector):
    col = start_collector(max_jobs=3)
    with col.channel() as chan:
        for i in range(3):
            assert [c.ack.seq for c in converse(chan, [hello(job=f"j{i}"), batch(1, steps=[step(1)])])] == [1]
        with pytest.raises(grpc.RpcError) as err:
            converse(chan, [hello(job="j3"), batch(1, steps=[step(1)])])
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "maximum of 3 jobs (max_jobs)" in err.value.details() and "'j3'" in err.value.details()
        # a rank already held reconnects (a collector restart, a network blip): never refused
        assert [c.ack.seq for c in converse(chan, [hello(job="j1"), batch(2, steps=[step(2)])])] == [2]
    text = col.get("/metrics")[2].decode()
    assert value(text, "stepwatch_collector_streams_rejected_total", reason="too_many_jobs") == 1
    assert value(text, "stepwatch_steps_total", training_job="j3") is None


def test_ranks_beyond_max_ranks_per_job_are_refused(start_collector):
    col = start_collector(max_ranks_per_job=2)
    with col.channel() as chan:
        for r in range(2):
            converse(chan, [hello(rank=r), batch(1, steps=[step(1)])])
        with pytest.raises(grpc.RpcError) as err:
            converse(chan, [hello(rank=2), batch(1, steps=[step(1)])])
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_ranks_per_job" in err.value.details()
    text = col.get("/metrics")[2].decode()
    assert value(text, "stepwatch_collector_streams_rejected_total", reason="too_many_ranks") == 1


def test_huge_labels_event_messages_and_window_lists_are_cut_and_counted(start_collector):
    col = start_collector()
    big = "x" * (1 << 20)
    h = hello(host=big)
    h.hello.gpu.name = big
    h.hello.config.update({f"k{i}": big[:1000] for i in range(200)})
    window = agent_pb2.WindowSummary(window_id=1, first_step=1, last_step=3)
    window.top_ops.extend(agent_pb2.NamedTime(name=f"{i:05d}" + "o" * 2000, seconds=i, count=1) for i in range(2000))
    with col.channel(**{"grpc.max_send_message_length": 8 << 20}) as chan:
        acks = converse(chan, [h, batch(1, steps=[step(1)],
                                        events=[agent_pb2.Event(time_s=1.0, kind="hook_error", message="m" * 100_000)],
                                        windows=[window])])
    assert [a.ack.seq for a in acks] == [1]
    status, _, body = col.get("/metrics")
    text = body.decode()
    assert len(body) < 200_000, len(body)  # a 1 MB host name on every series would be > 100 MB
    nodes = {s.labels["node"] for fam in text_string_to_metric_families(text) for s in fam.samples if "node" in s.labels}
    assert nodes == {"x" * 256}
    # host, GPU name, 200 config entries (136 beyond 64, 64 values over 256), the event
    # message, 2,000 op names: each cut where it entered
    assert value(text, "stepwatch_collector_trimmed_total", what="string") == 1 + 1 + 200 + 1 + 2000
    assert value(text, "stepwatch_collector_trimmed_total", what="window_names") >= 1
    doc = json.loads(col.get("/api/jobs/j/windows")[2])
    ops = doc["ranks"][0]["windows"][0]["top_ops"]
    assert len(ops) == 50 and ops[0]["seconds"] == 1999 and max(len(o["name"]) for o in ops) == 256
    assert len(col.get("/api/jobs")[2]) < 100_000


def test_bogus_job_names_past_max_jobs_are_refused_and_the_scrape_stays_small(start_collector):
    """The abuse case of the hardening issue (10,000 job names gave an 89 MB scrape): with the
    default max_jobs (1,000) every name past it is refused (here 1,000 more: each is refused the
    same way, so 9,000 more took 24 s of the suite and tested nothing else) and the scrape of
    the 1,000 stays small."""
    col = start_collector()
    refused = 0
    with col.channel() as chan:
        for i in range(2_000):
            try:
                converse(chan, [hello(job=f"bogus-{i:05d}-" + "y" * 200), batch(1, steps=[step(1)])])
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                refused += 1
    assert refused == 1_000
    t0 = time.monotonic()
    body = col.get("/metrics")[2]
    print(f"\n/metrics with 1,000 one-rank jobs: {len(body) / 1e6:.1f} MB in {time.monotonic() - t0:.2f} s")
    assert len(body) < 40e6, len(body)
