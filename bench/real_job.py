"""A training job as users run them, for the real-recording corpus and the after-effect A/B.

    python bench/real_job.py --size m --duration-s 600 --agent attach --steps-out steps.json
    torchrun --nproc_per_node 2 bench/real_job.py --size m ...      # NCCL DDP

A GPT-style bf16 transformer (causal mask, embedding and head), AdamW, a DataLoader over random
tokens with two workers and pinned memory, ``loss.item()`` every step (as most loops log).
``--size`` picks the model and the step length it aims at (s ~8 ms, m ~40 ms, l ~150 ms); the
batch is calibrated to that length on the card before the agent attaches (rank 0's choice is
broadcast under DDP), so H100 and H200 runs have comparable steps.

Unmarked pauses, as real jobs have them: ``--eval-every-s`` runs an evaluation (forward passes
without gradients for ``--eval-s``), ``--ckpt-every-s`` writes a checkpoint with ``torch.save``.
Neither is marked with ``agent.pause``: the detector has to recognise them.

``--steps-out`` (``{rank}`` replaced by the rank) writes the job's own clock per step (host time after ``loss.item()``, which
waits for the step), the same measurement with or without the agent: the A/B reads it.
``--agent``: ``attach`` (defaults, or the STEPWATCH_* environment), ``none``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

SIZES = {  # d_model, layers, heads, seq, vocab, first batch, target step seconds
    "s": (512, 4, 8, 512, 8192, 8, 0.008),
    "m": (1024, 12, 16, 1024, 32000, 8, 0.040),
    "l": (2048, 16, 16, 1024, 32000, 8, 0.150),
}


class Tokens(Dataset):
    def __init__(self, seq: int, vocab: int):
        self.seq, self.vocab = seq, vocab

    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
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
    a = p.parse_args()
    ddp = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if ddp:
        torch.distributed.init_process_group("nccl")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    rank = int(os.environ.get("RANK", "0"))
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = True
    d, layers, heads, seq, vocab, batch, target = SIZES[a.size]
    torch.manual_seed(0)
    model = GPT(d, layers, heads, seq, vocab).to(device)
    if ddp:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_fn = nn.CrossEntropyLoss()

    def step(tokens):
        tokens = tokens.to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = loss_fn(logits.reshape(-1, vocab).float(), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    def timed(b: int, n: int) -> float:
        x = torch.randint(0, vocab, (b, seq + 1)).pin_memory()
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
            if abs(new - batch) <= max(1, batch // 20):
                break
            batch = new
        if ddp:
            t = torch.tensor([batch], device=device)
            torch.distributed.broadcast(t, 0)
            batch = int(t.item())
    loader = DataLoader(Tokens(seq, vocab), batch_size=batch, num_workers=2, pin_memory=True,
                        persistent_workers=True)
    if a.agent == "attach":
        from stepwatch import agent
        agent.attach(job=a.job or None, samples_per_step=batch, tokens_per_step=batch * seq)
    start = last_eval = last_ckpt = time.perf_counter()
    ends, marks = [], []
    for tokens in loader:
        step(tokens)
        now = time.perf_counter()
        ends.append(now)
        stop = now - start >= a.duration_s
        if ddp:  # every rank stops at the same step
            flag = torch.tensor([1 if stop else 0], device=device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            stop = bool(flag.item())
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
    if a.steps_out:
        with open(a.steps_out.replace("{rank}", str(rank)), "w") as fh:
            json.dump({"size": a.size, "batch": batch, "rank": rank, "agent": a.agent,
                       "device": torch.cuda.get_device_name(device), "torch": torch.__version__,
                       "env": {k: v for k, v in os.environ.items() if k.startswith(("STEPWATCH_", "TEARDOWN"))},
                       "start": start, "marks": marks,
                       "step_s": [round(b - e, 6) for e, b in zip([start] + ends, ends)]}, fh)
    print(f"rank {rank}: {len(ends)} steps, batch {batch}, median "
          f"{sorted(b - e for e, b in zip([start] + ends, ends))[len(ends) // 2] * 1e3:.1f} ms", flush=True)
    if ddp:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
