"""Fuzzing the ingest with real gRPC on loopback: Hypothesis-built AgentMessage streams (odd
names, negative and huge numbers, NaN and infinities, huge lists) and raw bytes, more than
10,000 messages per run. The collector must answer every stream with acks or a clear status,
never crash, keep /healthz answering and stay within its bounds (jobs, scrape size)."""

from __future__ import annotations

import grpc
from hypothesis import HealthCheck, given, settings, strategies as st

from stepwatch.proto.stepwatch.v1 import agent_pb2

CONNECT = "/stepwatch.v1.AgentService/Connect"
SENT = {"messages": 0, "acks": 0}
CLEAN = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAUTHENTICATED}

text = st.text(max_size=300)
floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -1.0, 1e308, 5e-324])
u64 = st.integers(0, 2**64 - 1)
i32 = st.integers(-2**31, 2**31 - 1)

hellos = st.builds(lambda job, rank, host, session: agent_pb2.AgentMessage(hello=agent_pb2.Hello(
    job=job, rank=rank, host=host, session_id=session)),
    st.sampled_from(["j", "fuzz", "job-2", "x" * 256]) | text, st.integers(0, 63) | i32, text, text)
steps = st.builds(lambda step, end, dur, wait, tokens, phase: agent_pb2.StepRecord(
    step=step, end_time_s=end, duration_s=dur, dataloader_wait_s=wait, tokens=tokens, phase=phase),
    u64, floats, floats, floats, u64, st.sampled_from(["", "eval", "checkpoint"]) | text)
windows = st.builds(lambda first, last, comp, comm, names: agent_pb2.WindowSummary(
    first_step=first, last_step=last, compute_s=comp, communication_s=comm, span_s=comp,
    top_ops=[agent_pb2.NamedTime(name=n, seconds=comp, count=3) for n in names]),
    u64, u64, floats, floats, st.lists(text, max_size=60))
batches = st.builds(lambda seq, ss, ws, evs, gpu: agent_pb2.AgentMessage(batch=agent_pb2.Batch(
    seq=seq, steps=ss, windows=ws, events=[agent_pb2.Event(time_s=1.0, kind=k, message=m) for k, m in evs],
    gpu_samples=[agent_pb2.GpuSample(time_s=g, sm_active_ratio=g, utilization_ratio=g) for g in gpu])),
    u64, st.lists(steps, max_size=30), st.lists(windows, max_size=2), st.lists(st.tuples(text, text), max_size=3),
    st.lists(floats, max_size=3))
streams = st.tuples(hellos, st.lists(batches | st.builds(agent_pb2.AgentMessage), min_size=10, max_size=40))
raw = st.lists(st.binary(max_size=200), min_size=10, max_size=40)


def _send(chan, messages):
    call = chan.stream_stream(CONNECT, request_serializer=lambda b: b, response_deserializer=lambda b: b)
    SENT["messages"] += len(messages)
    try:
        for _ in call(iter(messages), timeout=20):
            SENT["acks"] += 1
    except grpc.RpcError as exc:
        assert exc.code() in CLEAN, (exc.code(), exc.details())
        assert exc.details(), "a refusal says why"


def test_fuzzed_streams_and_raw_bytes_never_break_the_collector(start_collector):
    col = start_collector(max_jobs=50)
    with col.channel() as chan:

        @settings(max_examples=450, deadline=None, database=None, derandomize=False,
                  suppress_health_check=list(HealthCheck))
        @given(stream=streams)
        def structured(stream):
            hello, rest = stream
            _send(chan, [hello.SerializeToString(), *(m.SerializeToString() for m in rest)])

        @settings(max_examples=250, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(chunks=raw, with_hello=st.booleans())
        def garbage(chunks, with_hello):
            first = [agent_pb2.AgentMessage(hello=agent_pb2.Hello(job="raw", rank=0)).SerializeToString()]
            _send(chan, (first if with_hello else []) + chunks)

        structured()
        garbage()
    print(f"\nfuzz: {SENT['messages']} messages, {SENT['acks']} batches acknowledged")
    assert SENT["messages"] >= 10_000 and SENT["acks"] >= 1_000, SENT
    assert col.get("/healthz")[0] == 200
    jobs = {st.job for st in col.collector.state.snapshot()}
    assert len(jobs) <= 50, len(jobs)
    status, _, body = col.get("/metrics")
    assert status == 200 and len(body) < 20e6, len(body)
    assert col.get("/api/jobs")[0] == 200 and col.get("/api/alerts")[0] == 200
