"""A recorded live session replayed gives the alerts it gave live.

A real collector on loopback records what two simulated ranks send over real gRPC: steps (a
straggler and a slowdown), allocator samples (an OOM), NVML samples (thermal throttling) and
host samples (a growing RSS). Housekeeping runs on the same data-clock ticks replay uses.
`stepwatch replay` on the record file must then give the same alerts, with the same steps and
times, covering the step, allocator, GPU and host detectors alike.
"""

from __future__ import annotations

import json

from collector_testlib import AckStream, hello

from stepwatch.collector._replay import replay
from stepwatch.collector.ingest._record import read_record
from stepwatch.collector.tools import main
from stepwatch.collector.detect import parse_detection
from stepwatch.proto.stepwatch.v1 import agent_pb2

T0 = 1_700_000_000.0
TICK_S = 10.0
DETECTION = {"warmup_steps": 10, "eval_interval_s": TICK_S,
             "drift": {"bucket_s": 0.5, "min_bucket_steps": 3, "warmup_s": 2, "settle_s": 6, "critical_window_s": 2, "warning_window_s": 3, "info_window_s": 6, "clear_s": 1, "z": 3},
             "gpu": {"for_s": 20},
             "memory": {"leak_window_s": 60, "leak_segments": 6, "leak_min_growth_ratio": 0.1}}


def rank_batches(rank: int, steps: int = 2000, per_batch: int = 20):
    """(data time, Batch) of one rank: 35 ms steps; rank 1 1.5x slower from step 800 (drift), rank 0
    throttled from step 1200, rank 0's RSS grows, one OOM on rank 1 at step 1500."""
    t, out, seq = T0, [], 0
    for first in range(1, steps + 1, per_batch):
        seq += 1
        batch = agent_pb2.Batch(seq=seq, sealed_time_s=t)
        for s in range(first, first + per_batch):
            dt = 0.035 * (1.5 if rank == 1 and s >= 800 else 1.0) * (1 + 0.01 * ((s * 7919) % 5 - 2) / 2)
            t += dt
            batch.steps.add(step=s, end_time_s=t, duration_s=dt, dataloader_wait_s=0.001,
                            clock=agent_pb2.STEP_CLOCK_CUDA_EVENT)
        reasons = 0x40 if rank == 0 and first >= 1200 else 0x4
        batch.gpu_samples.add(time_s=t, utilization_ratio=0.9, clock_event_reasons=reasons,
                              sm_clock_hertz=1.98e9, memory_used_bytes=40 << 30, memory_total_bytes=141 << 30)
        rss = (2 << 30) + (first * (1 << 20) if rank == 0 else 0)
        batch.host.add(time_s=t, resident_memory_bytes=rss, cpu_seconds=first * 0.03,
                       host_memory_available_bytes=64 << 30)
        batch.allocator.add(time_s=t, allocated_bytes=10 << 30, reserved_bytes=12 << 30,
                            inactive_split_bytes=1 << 30, ooms=1 if rank == 1 and first >= 1500 else 0,
                            device_total_bytes=141 << 30)
        out.append((t, batch))
    return out


def run_live(running) -> list:
    """Send both ranks' batches interleaved in data-time order; tick housekeeping exactly where
    replay's data clock ticks (every TICK_S from the first event)."""
    events = sorted([(t, rank, b) for rank in (0, 1) for t, b in rank_batches(rank)], key=lambda e: e[0])
    clock, col = running.clock, running.collector
    clock.now = T0
    with running.channel() as chan:
        streams = {rank: AckStream(chan, hello(rank=rank, session=f"s{rank}")) for rank in (0, 1)}
        streams[0].send(agent_pb2.Batch(seq=0))  # both Hellos are applied before any data
        streams[1].send(agent_pb2.Batch(seq=0))
        next_tick = T0
        for t, rank, batch in events:
            while t >= next_tick:
                clock.now = next_tick
                running.loop.call(_tick(col))
                next_tick += TICK_S
            clock.now = t
            streams[rank].send(batch)
        end = clock.now
        for rank in (0, 1):
            streams[rank].close()
    clock.now = end
    running.loop.call(_tick(col))
    # The rank whose slowdowns fired (straggler and drift, a second apart) was asked for a
    # profiler window and a trace, once each; the trace it sent is attached to the slowdown
    # alert that asked for it, and to that one only.
    kinds = [c.WhichOneof("payload") for c in streams[1].commands]
    assert sorted(kinds) == ["capture_trace", "window_now"], kinds
    slow = [a for a in col.detection.book.snapshot() if a.rank == 1 and a.alertname in
            ("StepwatchThroughputDrift", "StepwatchStragglerRank")]
    assert len(slow) == 2 and [a.trace for a in slow if a.trace] == ["node-a:/traces/rank1.json.gz"], \
        [(a.alertname, a.trace) for a in slow]
    return col.detection.book.snapshot()


async def _tick(col):
    col.housekeeping()


def key(a) -> tuple:
    return (a.alertname, a.job, a.rank, a.severity, a.step, a.starts_at, a.fired_at)


def test_recorded_session_replays_to_the_same_alerts(start_collector, tmp_path):
    record = tmp_path / "session.jsonl"
    running = start_collector(record=str(record), detection=parse_detection(DETECTION),
                              agent_grace_s=3600.0)
    live = [a for a in run_live(running) if a.fired_at is not None]
    names = {a.alertname for a in live}
    # Every kind of record took part: steps, NVML, host, allocator.
    assert {"StepwatchThroughputDrift", "StepwatchGpuThrottled", "StepwatchHostMemoryLeak",
            "StepwatchOOM"} <= names, sorted(names)

    with open(record, encoding="utf-8") as fh:
        replayed = replay(read_record(fh), parse_detection(DETECTION), agent_grace_s=3600.0)
    assert sorted(map(key, replayed)) == sorted(map(key, live))


def test_replay_cli_reads_the_live_record(start_collector, tmp_path, capsys):
    record = tmp_path / "session.jsonl"
    running = start_collector(record=str(record), detection=parse_detection(DETECTION),
                              agent_grace_s=3600.0)
    live = [a for a in run_live(running) if a.fired_at is not None]
    cfg = tmp_path / "c.yml"
    cfg.write_text(json.dumps({"detection": DETECTION, "agent_grace_s": 3600}))
    assert main(["replay", str(record), "--config", str(cfg), "--format", "json"]) == 0
    *printed, count = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert count == {"kind": "count", "episodes": len(live)}
    assert sorted((p["alertname"], p["rank"], p["severity"], p["step"]) for p in printed) == \
        sorted((a.alertname, a.rank, a.severity, a.step) for a in live)
