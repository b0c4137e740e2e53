"""A burst of new agent streams (a collector restart: every agent of a fleet reconnects within
its backoff) is admitted whole. gRPC's server queues calls not yet taken by the application up
to a limit (1,000 by default, then refuses them: "INTERNAL: Internal error from Core" at the
agent); the collector raises it. Real gRPC on loopback, 1,500 streams opened at once."""

from __future__ import annotations

import asyncio

import grpc

from collector_testlib import batch, hello, step
from stepwatch.proto.stepwatch.v1 import agent_pb2

STREAMS = 1500


async def _burst(address: str) -> dict:
    outcome = {"acked": 0, "errors": []}
    channels = [grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(15)]

    async def one(i: int) -> None:
        msgs = [hello(job=f"burst-{i // 64}", rank=i % 64, session=f"s{i}").SerializeToString(),
                batch(1, steps=[step(1)]).SerializeToString()]

        async def requests():
            for m in msgs:
                yield m

        call = channels[i % len(channels)].stream_stream(
            "/stepwatch.v1.AgentService/Connect", request_serializer=None,
            response_deserializer=agent_pb2.Command.FromString)(requests(), timeout=60)
        try:
            async for cmd in call:
                if cmd.HasField("ack"):
                    outcome["acked"] += 1
        except grpc.aio.AioRpcError as exc:
            outcome["errors"].append(f"{exc.code().name}: {exc.details()}")

    await asyncio.gather(*(one(i) for i in range(STREAMS)))
    for ch in channels:
        await ch.close()
    return outcome


def test_1500_streams_opened_at_once_are_all_admitted(start_collector):
    running = start_collector(max_jobs=100)
    outcome = asyncio.run(_burst(running.collector.grpc_address))
    assert not outcome["errors"], (len(outcome["errors"]), sorted(set(outcome["errors"]))[:3])
    assert outcome["acked"] == STREAMS
