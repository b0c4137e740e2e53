"""Message builders shared by the collector tests (unique module name: importable from tests)."""

from __future__ import annotations

from stepwatch.proto.stepwatch.v1 import agent_pb2


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
