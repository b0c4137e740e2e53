"""Message builders shared by the collector tests (unique module name: importable from tests)."""

from __future__ import annotations

import queue

from stepwatch.proto.stepwatch.v1 import agent_pb2, agent_pb2_grpc


def hello(job: str = "j", rank: int = 0, session: str = "s1", **kw) -> agent_pb2.AgentMessage:
    fields = dict(job=job, rank=rank, local_rank=rank % 8, world_size=2, host="node-a", pid=4242,
                  session_id=session, agent_version="0.1.0", torch_version="2.11.0", cuda_version="13.0",
                  driver_version="580.1", gpu=agent_pb2.GpuIdentity(index=rank % 8, uuid=f"GPU-{rank}",
                                                                     name="NVIDIA H200",
                                                                     total_memory_bytes=141 << 30))
    fields.update(kw)
    return agent_pb2.AgentMessage(hello=agent_pb2.Hello(**fields))


def batch(seq: int, **kw) -> agent_pb2.AgentMessage:
    return agent_pb2.AgentMessage(batch=agent_pb2.Batch(seq=seq, **kw))


def step(n: int, duration: float = 0.035, wait: float = 0.001, **kw) -> agent_pb2.StepRecord:
    return agent_pb2.StepRecord(step=n, end_time_s=1_700_000_000.0 + n, duration_s=duration,
                                clock=agent_pb2.STEP_CLOCK_CUDA_EVENT, dataloader_wait_s=wait, **kw)


def apply(state, key, session: str, batch: agent_pb2.Batch, now: float) -> str:
    """``state.apply_batch`` with the batch's columns read as the pipeline reads them; the verdict."""
    from stepwatch.collector.wire._columns import SampleColumns, step_columns

    return state.apply_batch(key, session, batch, now, step_columns(batch), SampleColumns(batch))[0]


def columns(batch: agent_pb2.Batch) -> tuple:
    """The batch's (steps, samples) columns, as the pipeline hands them to its listeners."""
    from stepwatch.collector.wire._columns import SampleColumns, step_columns

    return step_columns(batch), SampleColumns(batch)


class Stream:
    """One agent stream over real gRPC: ``send`` a message and take its first reply."""

    def __init__(self, chan, first):
        self.out: queue.Queue = queue.Queue()
        self.out.put(first)
        self.replies = agent_pb2_grpc.AgentServiceStub(chan).Connect(iter(self.out.get, None), timeout=30)

    def send(self, msg):
        self.out.put(msg)
        return next(self.replies)

    def close(self):
        self.out.put(None)
        list(self.replies)


class AckStream:
    """One agent stream fed message by message; ``send`` waits for the ack of a batch."""

    def __init__(self, chan, first: agent_pb2.AgentMessage):
        self._out: queue.Queue = queue.Queue()
        self.commands: list = []
        self.answered = False
        self._out.put(first)
        self._replies = agent_pb2_grpc.AgentServiceStub(chan).Connect(iter(self._out.get, None), timeout=60)

    def send(self, batch: agent_pb2.Batch) -> None:
        """Send a batch (with the trace of an earlier capture request, as an agent would) and
        wait for its ack; window and capture requests arriving meanwhile are kept."""
        for request in self.commands:
            if request.HasField("capture_trace") and not self.answered:
                batch.traces.add(request_id=request.capture_trace.request_id, path="/traces/rank1.json.gz",
                                 first_step=1, last_step=5)
                self.answered = True
        self._out.put(agent_pb2.AgentMessage(batch=batch))
        reply = next(self._replies)
        while reply.HasField("window_now") or reply.HasField("capture_trace"):
            self.commands.append(reply)
            reply = next(self._replies)
        assert reply.ack.seq == batch.seq, reply

    def close(self) -> None:
        self._out.put(None)
        assert list(self._replies) == []
