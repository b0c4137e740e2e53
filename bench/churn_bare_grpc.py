"""What a churn of connections leaves in a gRPC server that keeps nothing: the floor under the
collector's own figure (issue: RSS within 20% of idle after a churn of 100k connections).

    python bench/churn_bare_grpc.py --cycles 20000 --ranks 1000 --workers 2

A server process with the collector's gRPC options (``server_options`` of
``collector/ingest/_grpc_server.py``, at the default message bound) and its modules loaded,
whose AgentService.Connect reads each message, answers every Batch with an Ack and holds nothing (no rank, no state, no log line); the same client processes and cycles
as bench/connection_churn.py (a new channel, a Hello, one Batch, its Ack, closed). RSS with
psutil at idle, at the end of the churn and ``--settle-s`` after it. The difference between this
figure and the collector's is what the collector's own structures leave.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


async def _serve(ready: str) -> None:
    import grpc

    from stepwatch.collector._config import CollectorSettings
    from stepwatch.collector.ingest._grpc_server import server_options
    from stepwatch.proto.stepwatch.v1 import agent_pb2

    async def connect(requests, context):
        async for msg in requests:
            if msg.HasField("batch"):
                yield agent_pb2.Command(ack=agent_pb2.Ack(seq=msg.batch.seq))

    server = grpc.aio.server(options=server_options(CollectorSettings().max_message_bytes))
    handler = grpc.stream_stream_rpc_method_handler(
        connect, request_deserializer=agent_pb2.AgentMessage.FromString,
        response_serializer=agent_pb2.Command.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "stepwatch.v1.AgentService", {"Connect": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    with open(ready + ".tmp", "w") as fh:
        json.dump({"grpc": f"127.0.0.1:{port}"}, fh)
    os.replace(ready + ".tmp", ready)
    await server.wait_for_termination()


def bare_churn(cycles: int, ranks: int, workers: int, settle_s: float) -> dict:
    from connection_churn import drive, rss_mb, stop

    ready = os.path.join(tempfile.mkdtemp(prefix="bare-churn-"), "ready.json")
    env = dict(os.environ, GRPC_ENABLE_FORK_SUPPORT="0")
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", ready], env=env)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the bare server did not start")
            time.sleep(0.05)
        address = json.load(open(ready))["grpc"]
        time.sleep(2)
        idle = rss_mb(proc.pid)
        results, churn_s, peak = drive(address, proc.pid, cycles, ranks, workers)
        at_end = rss_mb(proc.pid)
        time.sleep(settle_s)
        after = rss_mb(proc.pid)
        return {"server": "bare gRPC", "cycles": cycles, "ranks": ranks, "workers": workers,
                "acked": sum(d for d, _ in results), "failed": sum(f for _, f in results),
                "churn_s": round(churn_s, 1), "rss_idle_mb": round(idle, 1), "rss_peak_mb": round(peak, 1),
                "rss_end_mb": round(at_end, 1), "rss_after_mb": round(after, 1),
                "after_over_idle": round(after / idle - 1, 3)}
    finally:
        stop(proc)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        asyncio.run(_serve(sys.argv[2]))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cycles", type=int, default=20_000)
    p.add_argument("--ranks", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--settle-s", type=float, default=10.0)
    a = p.parse_args()
    print(json.dumps(bare_churn(a.cycles, a.ranks, a.workers, a.settle_s)))


if __name__ == "__main__":
    main()
