"""What timing each collective would cost a DDP job, measured before building it.

    torchrun --nproc_per_node 1 bench/collective_timing_probe.py --size s --out hooks.json
    TORCH_NCCL_TRACE_BUFFER_SIZE=2000 torchrun --nproc_per_node 1 \\
        bench/collective_timing_probe.py --size s --flight --out flight.json

Two ways to know how long each of a step's all-reduces took (issue: always-on attribution,
item 1), each with a cost the agent would pay every step for the whole job:

- **a DDP communication hook** that records a CUDA event before each bucket's all-reduce and
  one in its future's callback (read late, like the step time). DDP then calls Python once per
  bucket instead of its C++ all-reduce. Arms, each its own copy of the model with its own DDP
  and optimizer, alternated in blocks of ``--steps`` for ``--rounds`` rounds: ``builtin`` (no
  hook), ``python`` (torch's own ``allreduce_hook``: the cost of a Python hook alone) and
  ``timed`` (the hook with events). The job's own clock per step (host time after
  ``loss.item()``), medians per arm; the timed arm's collective milliseconds per step.
- **c10d's flight recorder** with its timing on (``--flight``: ``TORCH_NCCL_TRACE_BUFFER_SIZE``
  set by the caller, ``_enable_collectives_timing()`` on the default group): the ``builtin`` arm
  only, the recorder read every ``--dump-every`` steps with ``_dump_nccl_trace`` on NCCL
  (``_dump_fr_trace``, the generic recorder's reader, on gloo; no stack traces); the time each
  read took on the training thread and how many entries had a duration.

On a CPU (gloo, any rank count) the script runs as a smoke test of itself. A one-rank NCCL job
on a one-GPU machine has the hook's and the recorder's costs; what it cannot show is a peer's
wait (that needs two GPUs).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import pickle
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn


def _real_job():
    spec = importlib.util.spec_from_file_location(
        "real_job", os.path.join(os.path.dirname(os.path.abspath(__file__)), "real_job.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def timed_hook(state, bucket):
    """The DDP hook (a plain function: DDP reads its ``__name__``); ``state`` a TimedHook."""
    return state.hook(bucket)


class TimedHook:
    """Averages a bucket by all-reduce as DDP does, timing it with two events (host clock on
    CPU). ``take()`` returns the finished buckets' seconds, never waiting."""

    def __init__(self, cuda: bool, world: int):
        self.cuda, self.world = cuda, world
        self.pending: list = []

    def hook(self, bucket):
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            start = time.perf_counter()
        fut = dist.all_reduce(bucket.buffer().div_(self.world), async_op=True).get_future()

        def done(f):
            if self.cuda:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
            else:
                end = time.perf_counter()
            self.pending.append((start, end))
            return f.value()[0]

        return fut.then(done)

    def take(self) -> list:
        out, keep = [], []
        for start, end in self.pending:
            if not self.cuda:
                out.append(end - start)
            elif end.query():
                out.append(start.elapsed_time(end) / 1000.0)
            else:
                keep.append((start, end))
        self.pending = keep
        return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="s")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--flight", action="store_true")
    p.add_argument("--dump-every", type=int, default=100)
    p.add_argument("--out", default="")
    a = p.parse_args()
    rj = _real_job()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    flight = {}
    if a.flight:
        pg = dist.distributed_c10d._get_default_group()
        try:
            pg._enable_collectives_timing()
            flight["timing_enabled"] = True
        except Exception as exc:
            flight["timing_enabled"] = repr(exc)
        # An NCCL group's entries are read by _dump_nccl_trace (the documented reader for NCCL);
        # _dump_fr_trace read none on one and on two H200 ranks, and reads a gloo group's
        # (35 entries after 40 steps of the CPU smoke run)
        c10d = torch._C._distributed_c10d
        reader = "_dump_nccl_trace" if cuda and hasattr(c10d, "_dump_nccl_trace") else "_dump_fr_trace"
        flight["reader"] = reader
    d, layers, heads, seq, vocab, _, _ = rj.SIZES[a.size]
    torch.manual_seed(0)
    base = rj.GPT(d, layers, heads, seq, vocab).to(device)
    arms = ["builtin"] if a.flight else ["builtin", "python", "timed"]
    models, opts, hooks = {}, {}, {}
    for arm in arms:
        m = nn.parallel.DistributedDataParallel(copy.deepcopy(base), device_ids=[local] if cuda else None)
        if arm == "python":
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
            m.register_comm_hook(None, allreduce_hook)
        elif arm == "timed":
            hooks[arm] = TimedHook(cuda, world)
            m.register_comm_hook(hooks[arm], timed_hook)
        models[arm], opts[arm] = m, torch.optim.AdamW(m.parameters(), lr=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randint(0, vocab, (a.batch, seq + 1), device=device)

    def step(arm):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            out = models[arm](x[:, :-1])
            loss = loss_fn(out.float().reshape(-1, vocab), x[:, 1:].reshape(-1))
        loss.backward()
        opts[arm].step()
        opts[arm].zero_grad(set_to_none=True)
        return loss.item()

    for arm in arms:  # warm-up, not counted
        for _ in range(20):
            step(arm)
    times = {arm: [] for arm in arms}
    blocks = {arm: [] for arm in arms}
    coll = {arm: [] for arm in arms}
    dumps = []
    for r in range(a.rounds):
        order = arms if r % 2 == 0 else arms[::-1]
        for arm in order:
            mine = []
            last = time.perf_counter()
            for i in range(a.steps):
                step(arm)
                now = time.perf_counter()
                mine.append(now - last)
                last = now
                if arm in hooks:
                    took = hooks[arm].take()
                    if took:
                        coll[arm].append(sum(took))
                        coll.setdefault("buckets", []).append(len(took))
                if a.flight and (i + 1) % a.dump_every == 0:
                    if not dumps:  # once: what every reader there is returns (which one holds the entries)
                        flight["entries_by_reader"] = {
                            name: len(pickle.loads(getattr(c10d, name)(
                                includeCollectives=True, includeStackTraces=False, onlyActive=False)).get("entries", []))
                            for name in ("_dump_nccl_trace", "_dump_fr_trace") if hasattr(c10d, name)}
                    t0 = time.perf_counter()
                    raw = getattr(c10d, reader)(
                        includeCollectives=True, includeStackTraces=False, onlyActive=False)
                    t1 = time.perf_counter()
                    entries = pickle.loads(raw).get("entries", [])
                    t2 = time.perf_counter()
                    timed = [e.get("duration_ms") for e in entries if e.get("duration_ms") is not None]
                    dumps.append({"read_s": t1 - t0, "unpickle_s": t2 - t1, "entries": len(entries),
                                  "with_duration": len(timed), "bytes": len(raw),
                                  "last_durations_ms": timed[-4:]})
                    last = time.perf_counter()  # (the read is reported apart, not in the step)
            times[arm].extend(mine)
            blocks[arm].append(statistics.median(mine))
    res = {"size": a.size, "batch": a.batch, "world": world, "rank": rank,
           "device": torch.cuda.get_device_name(device) if cuda else "cpu", "torch": torch.__version__,
           "steps_per_block": a.steps, "rounds": a.rounds,
           "median_ms": {arm: statistics.median(t) * 1e3 for arm, t in times.items()},
           "block_medians_ms": {arm: [round(b * 1e3, 4) for b in bl] for arm, bl in blocks.items()}}
    if "timed" in coll and coll["timed"]:
        res["timed_collective_ms_per_step"] = statistics.median(coll["timed"]) * 1e3
        res["timed_buckets_per_step"] = statistics.median(coll["buckets"])
    if a.flight:
        res["flight"] = dict(flight, dumps=dumps, env={k: v for k, v in os.environ.items()
                                                       if k.startswith(("TORCH_NCCL", "TORCH_FR"))})
    if len(arms) > 1:
        b = res["median_ms"]["builtin"]
        res["ratio_to_builtin"] = {arm: res["median_ms"][arm] / b for arm in arms}
    if a.out:
        with open(a.out.replace("{rank}", str(rank)), "w") as fh:
            json.dump(res, fh, indent=1)
    print(json.dumps({k: res[k] for k in ("median_ms", "ratio_to_builtin") if k in res}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
