"""A training job as users run them, for the real-recording corpus and the after-effect A/B.

    python bench/real_job.py --size m --duration-s 600 --agent attach --steps-out steps.json
    torchrun --nproc_per_node 2 bench/real_job.py --size m ...      # NCCL DDP

A GPT-style bf16 transformer (causal mask, embedding and head), AdamW, a DataLoader over random
tokens with two workers and pinned memory, ``loss.item()`` every step (as most loops log).
``--size`` picks the model and the step length it aims at (xs ~8 ms of few large kernels, s ~8 ms
of many small ones (launch-bound: 9-14 ms measured), m ~40 ms, l ~150 ms); the
batch is calibrated to that length on the card before the agent attaches (rank 0's choice is
broadcast under DDP), so H100 and H200 runs have comparable steps.

Unmarked pauses, as real jobs have them: ``--eval-every-s`` runs an evaluation (forward passes
without gradients for ``--eval-s``), ``--ckpt-every-s`` writes a checkpoint with ``torch.save``.
Neither is marked with ``agent.pause``: the detector has to recognise them.

``--steps-out`` (``{rank}`` replaced by the rank) writes the job's own clock per step (host time after ``loss.item()``, which
waits for the step), the same measurement with or without the agent: the A/B reads it.
``--agent``: ``attach`` (defaults, or the STEPWATCH_* environment), ``none``.

``--save-ckpt PATH`` writes the model and optimizer state at the end; ``--resume PATH`` starts
from it (a resumed run of the job, for run-to-run comparison).

``--inject CAUSE`` slows the job from ``--inject-after-s`` on (on ``--inject-rank``, or every
rank), by about ``--inject-ratio`` of the step time measured just before, in software only:
``gemm_backward`` / ``gemm_forward`` (extra bf16 matrix products in that pass), ``dataloader``
(the workers slower than the step), ``host`` (the training thread busy before forward),
``optimizer_loop`` (AdamW's for-loop implementation), ``sync`` (a synchronize before the
optimizer step), ``d2h`` (a device-to-host copy each step), ``empty_cache`` (the allocator's cache
emptied each step), ``small_ops`` (launch-bound tiny kernels in forward), ``allreduce`` (an extra
all-reduce each step, DDP only). The step and time of the change go to ``--steps-out``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

SIZES = {  # d_model, layers, heads, seq, vocab, first batch, target step seconds
    # ~8 ms of few large kernels (s is launch-bound); with d 2048 an H200 ran 13.1 ms at batch 2
    # and the calibration could not halve it (tests/data/real/h200v_1gpu_xs), so d 1536; an
    # H200 ran d 1536 at 10.6 ms at batch 2 and 11.0 ms at batch 1 (BATCH_xs=1,
    # tests/data/real/h200u_1gpu_xs): launch-bound there, the batch no longer sets the step
    "xs": (1536, 2, 12, 1024, 32000, 2, 0.008),
    "s": (512, 4, 8, 512, 8192, 8, 0.008),
    "m": (1024, 12, 16, 1024, 32000, 8, 0.040),
    "l": (2048, 16, 16, 1024, 32000, 8, 0.150),
    "t": (64, 1, 4, 32, 256, 4, 0.010),  # a CPU smoke test of the script
}


INJECT = ("gemm_backward", "gemm_forward", "dataloader", "host", "optimizer_loop", "sync", "d2h",
          "empty_cache", "small_ops", "allreduce")


class Tokens(Dataset):
    def __init__(self, seq: int, vocab: int):
        self.seq, self.vocab = seq, vocab
        self.delay = multiprocessing.Value("d", 0.0)  # seconds per sample, shared with the workers

    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        if self.delay.value:
            time.sleep(self.delay.value)
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, self.vocab, (self.seq + 1,), generator=g)


class GPT(nn.Module):
    def __init__(self, d: int, layers: int, heads: int, seq: int, vocab: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True, dropout=0.0,
                                           norm_first=True, activation="gelu")
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, x):
        h = self.emb(x) + self.pos[: x.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        return self.head(self.body(h, mask=mask, is_causal=True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=SIZES, default="m")
    p.add_argument("--duration-s", type=float, default=600.0)
    p.add_argument("--agent", choices=("attach", "none"), default="attach")
    p.add_argument("--job", default="")
    p.add_argument("--eval-every-s", type=float, default=0.0)
    p.add_argument("--eval-s", type=float, default=3.0)
    p.add_argument("--ckpt-every-s", type=float, default=0.0)
    p.add_argument("--steps-out", default="")
    p.add_argument("--batch", type=int, default=0, help="skip calibration, use this batch")
    p.add_argument("--inject", choices=INJECT)
    p.add_argument("--inject-after-s", type=float, default=60.0)
    p.add_argument("--inject-rank", type=int, default=-1)
    p.add_argument("--inject-ratio", type=float, default=0.15)
    p.add_argument("--inject-schedule", default="",
                   help="causes turned on in turn (comma-separated, every rank): the first at --inject-after-s, "
                        "each on for --inject-on-s, then off for --inject-off-s; CAUSE:RATIO gives that turn "
                        "its own --inject-ratio")
    p.add_argument("--inject-on-s", type=float, default=90.0)
    p.add_argument("--inject-off-s", type=float, default=140.0)
    p.add_argument("--save-ckpt", default="", help="at the end, the model and optimizer state to this file")
    p.add_argument("--resume", default="", help="start from a --save-ckpt file (a resumed run of the job)")
    a = p.parse_args()
    ddp = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if ddp:
        torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    rank = int(os.environ.get("RANK", "0"))
    cuda = torch.cuda.is_available()  # (CPU: a smoke test of the script only)
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    d, layers, heads, seq, vocab, batch, target = SIZES[a.size]
    torch.manual_seed(0)
    model = GPT(d, layers, heads, seq, vocab).to(device)
    if ddp:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if a.resume:
        saved = torch.load(a.resume, map_location=device)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
    loss_fn = nn.CrossEntropyLoss()
    cause = {"on": None, "gemms": 0, "ms": 0.0}  # what is injected now
    mat = torch.randn(2048 if cuda else 128, 2048 if cuda else 128, device=device, dtype=torch.bfloat16)

    class Extra(torch.autograd.Function):  # matrix products in the backward pass
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            y = mat
            for _ in range(cause["gemms"]):
                y = y @ mat
            return g + y.sum() * 0

    def gemms():
        y = mat
        for _ in range(cause["gemms"]):
            y = y @ mat
        return y

    def busy(ms):
        end = time.perf_counter() + ms / 1e3
        while time.perf_counter() < end:
            pass

    def step(tokens):
        on = cause["on"]
        if on == "host":
            busy(cause["ms"])
        tokens = tokens.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            x = tokens[:, :-1]
            if on == "small_ops":
                t = torch.zeros(8, device=device)
                for _ in range(cause["gemms"]):
                    t = t + 1
            logits = model(x)
            if on == "gemm_forward":
                logits = logits + gemms().sum() * 0
            if on == "gemm_backward":
                logits = Extra.apply(logits)
            loss = loss_fn(logits.reshape(-1, vocab).float(), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if on == "sync":
            sync()
        if on == "d2h":
            cause["buf"].cpu()
        if on == "empty_cache" and cuda:
            torch.cuda.empty_cache()
        if on == "allreduce":
            torch.distributed.all_reduce(cause["buf"])
        opt.step()
        return loss.item()

    def start_cause(step_s: float, batch: int, loader) -> None:
        """From now on, ``a.inject`` costing about ``a.inject_ratio`` x ``step_s``."""
        ms = a.inject_ratio * step_s * 1e3
        cause["ms"] = ms
        if a.inject in ("gemm_backward", "gemm_forward"):
            sync()
            t0 = time.perf_counter()
            y = mat
            for _ in range(20):
                y = y @ mat
            sync()
            cause["gemms"] = max(1, round(ms / ((time.perf_counter() - t0) * 1e3 / 20)))
        elif a.inject == "small_ops":
            cause["gemms"] = max(1, round(ms / 0.006))  # ~6 us of launch per tiny op
        elif a.inject == "dataloader":  # 2 workers: a batch every batch * delay / 2 seconds
            loader.dataset.delay.value = 2 * step_s * (1 + a.inject_ratio) / batch
        elif a.inject == "optimizer_loop":
            for group in opt.param_groups:
                group["foreach"] = group["fused"] = False
        elif a.inject in ("allreduce", "d2h"):  # a buffer that takes about ms: timed at 64 MiB
            buf = torch.zeros(16 << 20, device=device)
            op = (lambda b: torch.distributed.all_reduce(b)) if a.inject == "allreduce" else (lambda b: b.cpu())
            op(buf)
            sync()
            t0 = time.perf_counter()
            for _ in range(3):
                op(buf)
            sync()
            took_ms = (time.perf_counter() - t0) / 3 * 1e3
            cause["buf"] = torch.zeros(max(1024, int((16 << 20) * ms / took_ms)), device=device)
        cause["on"] = a.inject

    def stop_cause(loader) -> None:
        """The cause on now stops: the job as it was before it."""
        if cause["on"] == "dataloader":
            loader.dataset.delay.value = 0.0
        elif cause["on"] == "optimizer_loop":
            for group, (foreach, fused) in zip(opt.param_groups, cause["opt"]):
                group["foreach"], group["fused"] = foreach, fused
        cause.update(on=None, gemms=0, ms=0.0)

    def timed(b: int, n: int) -> float:
        x = torch.randint(0, vocab, (b, seq + 1))
        x = x.pin_memory() if cuda else x
        for _ in range(5):
            step(x)
        t0 = time.perf_counter()
        for _ in range(n):
            step(x)
        return (time.perf_counter() - t0) / n

    batch = a.batch or batch
    if not a.batch:
        for _ in range(3):  # the batch that gives the size's step length on this card
            took = timed(batch, 15)
            new = max(1, min(512, round(batch * target / took)))
            if ddp:  # every rank follows rank 0's choice: a rank that stopped calibrating
                # while another ran more DDP steps left both waiting in a collective for good
                t = torch.tensor([new], device=device)
                torch.distributed.broadcast(t, 0)
                new = int(t.item())
            if abs(new - batch) <= max(1, batch // 20):
                break
            batch = new
    loader = DataLoader(Tokens(seq, vocab), batch_size=batch, num_workers=2, pin_memory=cuda,
                        persistent_workers=True)
    if a.agent == "attach":
        from stepwatch import agent
        agent.attach(job=a.job or None, samples_per_step=batch, tokens_per_step=batch * seq)
    start = last_eval = last_ckpt = time.perf_counter()
    ends, marks = [], []
    injected = None
    mine = a.inject and a.inject_rank in (-1, rank)
    schedule = []  # (cause, ratio) per turn
    for item in (c for c in a.inject_schedule.split(",") if c):
        name, _, ratio = item.partition(":")
        if name not in INJECT or name == "allreduce":
            raise SystemExit(f"--inject-schedule: {item!r}: each cause one of {[c for c in INJECT if c != 'allreduce']}")
        try:
            schedule.append((name, float(ratio) if ratio else a.inject_ratio))
        except ValueError:
            raise SystemExit(f"--inject-schedule: {item!r}: the ratio after ':' is not a number") from None
    if schedule and a.inject:
        raise SystemExit("--inject-schedule and --inject: one or the other")
    cause["opt"] = [(g.get("foreach"), g.get("fused")) for g in opt.param_groups]
    turns = []  # the schedule's causes as run: cause, start step/time, end step/time, ms
    period = a.inject_on_s + a.inject_off_s
    for tokens in loader:
        step(tokens)
        now = time.perf_counter()
        ends.append(now)
        stop = now - start >= a.duration_s
        if schedule and not ddp:
            k, into = divmod(now - start - a.inject_after_s, period)
            k = int(k)
            want, ratio = schedule[k] if 0 <= k < len(schedule) and into < a.inject_on_s else (None, 0.0)
            if want != cause["on"]:
                if cause["on"] is not None:
                    stop_cause(loader)
                    turns[-1].update(end_step=len(ends) + 1, end_time=time.time())
                if want is not None:
                    tail = ends[-201:]
                    recent = sorted(y - x for x, y in zip(tail, tail[1:]))
                    a.inject, a.inject_ratio = want, ratio
                    start_cause(recent[len(recent) // 2], batch, loader)
                    turns.append({"cause": want, "step": len(ends) + 1, "time": time.time(), "ms": cause["ms"],
                                  "ratio": ratio})
        due = bool(a.inject) and injected is None and now - start >= a.inject_after_s
        if ddp:  # every rank stops (and starts the cause) at the same step
            flag = torch.tensor([1 if stop else 0, 1 if due else 0], device=device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            stop, due = bool(flag[0].item()), bool(flag[1].item())
        if due:
            injected = {"cause": a.inject, "step": len(ends) + 1, "time": time.time(), "rank": a.inject_rank,
                        "ratio": a.inject_ratio}
            if mine:  # (allreduce: every rank, --inject-rank -1)
                tail = ends[-201:]
                recent = sorted(b - e for e, b in zip(tail, tail[1:]))
                start_cause(recent[len(recent) // 2], batch, loader)
                injected["ms"] = cause["ms"]
        if stop:
            break
        if a.eval_every_s and now - last_eval >= a.eval_every_s:
            marks.append(("eval", len(ends)))
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                t_end = time.perf_counter() + a.eval_s
                while time.perf_counter() < t_end:
                    model(tokens[:, :-1].to(device)).float().mean().item()
            last_eval = time.perf_counter()
        if a.ckpt_every_s and now - last_ckpt >= a.ckpt_every_s:
            marks.append(("checkpoint", len(ends)))
            torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, f"/tmp/ckpt-{rank}.pt")
            last_ckpt = time.perf_counter()
    if a.save_ckpt and rank == 0:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, a.save_ckpt)
    if a.steps_out:
        with open(a.steps_out.replace("{rank}", str(rank)), "w") as fh:
            json.dump({"size": a.size, "batch": batch, "rank": rank, "agent": a.agent,
                       "device": torch.cuda.get_device_name(device) if cuda else "cpu", "torch": torch.__version__,
                       "env": {k: v for k, v in os.environ.items() if k.startswith(("STEPWATCH_", "TEARDOWN"))},
                       "start": start, "marks": marks, "injected": injected, "schedule": turns,
                       "phase_times": _phase_cost(),
                       "step_s": [round(b - e, 6) for e, b in zip([start] + ends, ends)]}, fh)
    print(f"rank {rank}: {len(ends)} steps, batch {batch}, median "
          f"{sorted(b - e for e, b in zip([start] + ends, ends))[len(ends) // 2] * 1e3:.1f} ms", flush=True)
    if ddp:
        torch.distributed.destroy_process_group()


def _phase_cost() -> dict:
    """The agent's phase timer: steps sampled and the host seconds they cost."""
    try:
        from stepwatch import agent
        timer = agent.current().phases
        return {"sampled": timer.sampled, "cost_s": timer.cost_s, "cost_ratio": timer.cost_ratio()}
    except Exception:
        return {}


if __name__ == "__main__":
    main()
