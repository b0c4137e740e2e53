"""The collector's resident memory under the string attacks of hardening round 2, on a real
collector process over real gRPC: 16 ranks of 8 jobs each send 5 batches, every batch near the
4 MB message bound, all of it strings (event kinds and messages, window activities, trace
references, the GPU's name and uuid). Before the string bounds, 8 ranks x 50 events with a
4 MB kind took the collector to 1,673 MB. The documented bound (docs/ARCHITECTURE.md, "Security
and bounds"): under 128 MB of growth for this attack (its strings, kept whole, are 270 MB),
and every API answer small."""

from __future__ import annotations

import time
import urllib.request

import grpc

from _procs import Collector
from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc

RANKS, BATCHES = 16, 5
BIG = 56 << 10  # 56 KB strings: 30 events x (kind + message) + the rest stays under 4 MB


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def messages(job: str, rank: int):
    now = time.time()
    yield agent_pb2.AgentMessage(hello=agent_pb2.Hello(
        job=job, rank=rank, world_size=RANKS // 8, host="node-a", pid=1000 + rank, session_id=f"s{rank}",
        agent_version="0.1.0", gpu=agent_pb2.GpuIdentity(index=0, uuid="u" * BIG, name="n" * BIG)))
    for seq in range(1, BATCHES + 1):
        big = chr(97 + seq % 26) * BIG
        b = agent_pb2.Batch(
            seq=seq,
            steps=[agent_pb2.StepRecord(step=seq, end_time_s=now + seq, duration_s=0.04, phase=big)],
            events=[agent_pb2.Event(time_s=now + seq, kind=f"{i}{big}", message=big) for i in range(30)],
            windows=[agent_pb2.WindowSummary(window_id=seq, first_step=seq, last_step=seq, activities=big)],
            traces=[agent_pb2.TraceRef(request_id=big, path=big, error=big, trace_id=big, upload_error=big)])
        b.gpu.name, b.gpu.uuid = big, big
        yield agent_pb2.AgentMessage(batch=b)


def test_string_attacks_leave_the_collector_inside_its_memory_bound(tmp_path):
    col = Collector(tmp_path).start()
    try:
        before = rss_mb(col.proc.pid)
        with grpc.insecure_channel(col.grpc, options=[("grpc.max_send_message_length", 8 << 20)]) as chan:
            stub = agent_pb2_grpc.AgentServiceStub(chan)
            for rank in range(RANKS):
                acks = list(stub.Connect(messages(f"attack-{rank % 8}", rank), timeout=60))
                assert [a.ack.seq for a in acks if a.HasField("ack")][-1] == BATCHES
        time.sleep(1)
        sizes = {}
        for path in ("/api/jobs", "/api/jobs?job=attack-0", "/api/traces", "/metrics", "/api/alerts"):
            sizes[path] = len(urllib.request.urlopen(col.url(path), timeout=30).read())
        grown = rss_mb(col.proc.pid) - before
        print(f"\nRSS {before:.0f} MB -> +{grown:.0f} MB; answers {sizes}")
        assert grown < 128, grown
        assert all(n < 2_000_000 for n in sizes.values()), sizes
    finally:
        col.kill()
