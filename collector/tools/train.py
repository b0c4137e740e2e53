"""The one training script of the demo, the tests and the benchmarks, with the agent attached.

Run as ``python -m stepwatch.collector.tools.train --steps 300``: a tiny transformer language
model on random tokens, on CPU (or CUDA with --device cuda), DDP over gloo/nccl when started
by torchrun, with injectable slowdowns and a hook-bypassing update for the tests.
:func:`transformer_step` is the bf16 transformer step the GPU tests and bench/ time.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402


class RandomTokens(Dataset):
    def __init__(self, n: int, seq: int, vocab: int, delay_s: float):
        self.n, self.seq, self.vocab, self.delay_s = n, seq, vocab, delay_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.delay_s:
            time.sleep(self.delay_s)
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, self.vocab, (self.seq + 1,), generator=g)


def transformer_step(device, d_model: int = 1024, layers: int = 6, batch: int = 16, seq: int = 512,
                     ddp: bool = False):
    """``(step, model, opt)``: ``step()`` runs one bf16-autocast forward, backward and AdamW
    step of a ``layers``-deep TransformerEncoder on a fixed random batch (no synchronize)."""
    layer = nn.TransformerEncoderLayer(d_model, 16, 4 * d_model, batch_first=True, dropout=0.0)
    model = nn.TransformerEncoder(layer, layers).to(device)
    if ddp:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, seq, d_model, device=device)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step, model, opt


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, seq: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=4 * d, batch_first=True,
                                           dropout=0.0)
        self.body = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, vocab)

    def forward(self, x):
        h = self.emb(x) + self.pos[: x.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        return self.head(self.body(h, mask=mask, is_causal=True))


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (forked)")
    p.add_argument("--load-delay-s", type=float, default=0.0, help="sleep per sample in the loader")
    p.add_argument("--step-sleep-s", type=float, default=0.0, help="extra host time per step")
    p.add_argument("--two-optimizers", action="store_true", help="head on its own optimizer")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0,
                   help="torch's intra-op CPU threads (0: torch's own choice); 1 keeps a tiny model's "
                        "steps steady on a machine whose cores are busy")
    p.add_argument("--slow-from-step", type=int, default=0,
                   help="from this step on, slow steps down by --slow-factor (0: never)")
    p.add_argument("--slow-factor", type=float, default=1.1,
                   help="step time multiplier: sleeps (factor-1) x the median of the 20 steps before")
    p.add_argument("--slow-rank", type=int, default=-1,
                   help="only this rank slows down (-1: all); the sleep happens inside the DataLoader "
                        "fetch, like a slow input pipeline on one node")
    p.add_argument("--cause", choices=CAUSES,
                   help="from --cause-from-step on, about --cause-ms more per step: extra matrix "
                        "products in the backward or forward pass, a sleep in the data loader, inside "
                        "Optimizer.step, or in the loop before it, the training thread busy before "
                        "forward (host_busy), many tiny operators (launch-bound), "
                        "a busy Python thread beside training, or the for-loop optimizer "
                        "(slow_optimizer; --cause-ms unused)")
    p.add_argument("--cause-from-step", type=int, default=0)
    p.add_argument("--cause-ms", type=float, default=5.0)
    p.add_argument("--backend", default="", help="torch.distributed backend (default: nccl on CUDA, else gloo)")
    p.add_argument("--same-gpu", action="store_true",
                   help="every rank on cuda:0 (with --backend gloo: two synchronous ranks on one GPU)")
    p.add_argument("--cause-rank", type=int, default=-1,
                   help="only this rank gets the --cause (-1: every rank): a straggler whose extra "
                        "work the others wait for inside the collectives")
    p.add_argument("--manual-update", action="store_true",
                   help="update the weights by hand (SGD) instead of optimizer.step(): the agent's "
                        "step hook never fires, like a fused or compiled step that bypasses it")
    p.add_argument("--eval-every", type=int, default=0,
                   help="every this many steps an evaluation pass, marked with agent.pause('eval')")
    p.add_argument("--eval-s", type=float, default=0.5, help="host seconds each evaluation takes")
    p.add_argument("--item", action="store_true",
                   help="read loss.item() every step (a host sync, as most training loops log)")
    p.add_argument("--no-agent", action="store_true")
    p.add_argument("--slow-after-session", type=int, default=0, metavar="N",
                   help="test hook: from the end of the N-th profiler session in this process on "
                        "(the agent's windows), --slow-after-session-s more host time per step: a "
                        "lasting after-effect made on purpose")
    p.add_argument("--slow-after-session-s", type=float, default=0.0)
    args = p.parse_args(argv)
    if args.threads < 0:
        p.error(f"--threads must be 0 (torch's choice) or more, got {args.threads}")
    return args


class _Slowdown:
    """Injected slowdown for the detection tests: from ``--slow-from-step`` on, each batch fetch
    sleeps (factor - 1) x the median step time measured over the 20 steps before."""

    def __init__(self, args, rank: int):
        on = args.slow_from_step > 0 and args.slow_rank in (-1, rank)
        self.start, self.factor, self.on = args.slow_from_step, args.slow_factor, on
        self.times, self.extra_s, self._prev = [], 0.0, time.perf_counter()

    def step_done(self, done: int) -> None:
        now = time.perf_counter()
        dt, self._prev = now - self._prev, now
        if self.on and self.start - 20 <= done < self.start:
            self.times.append(dt)
        if self.on and done + 1 == self.start and self.times:
            self.extra_s = (self.factor - 1) * sorted(self.times)[len(self.times) // 2]

    def wrap(self, loader):
        self._prev = time.perf_counter()
        if not self.on:
            return loader
        slow, fetch = self, loader.collate_fn

        def collate(batch):
            if slow.extra_s:
                time.sleep(slow.extra_s)
            return fetch(batch)

        loader.collate_fn = collate
        return loader


CAUSES = ("backward", "forward", "dataloader", "optimizer", "loop_sleep", "small_ops", "cpu_thread",
          "slow_optimizer", "host_busy")


def _gemm_seconds(a) -> float:
    """GPU seconds of one ``a @ a`` (measured once at start-up, before training)."""
    for _ in range(3):
        torch.mm(a, a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        torch.mm(a, a)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0 / 20


class _Cause:
    """Injected slowdown causes for the diagnosis tests (``--cause``), active once ``done()``
    reaches ``--cause-from-step``."""

    def __init__(self, args, done, params, optimizers, loader, model, device=None):
        mine = args.cause_rank in (-1, int(os.environ.get("RANK", "0")))
        self.on = lambda: mine and args.cause is not None and done() + 1 >= args.cause_from_step
        self.seconds = args.cause_ms / 1000.0
        self.a = torch.randn(256, 256)
        self.gemms = 0  # on CUDA: this many 2048^2 GEMMs per call (about --cause-ms of GPU time)
        if device is not None and device.type == "cuda" and args.cause in ("backward", "forward"):
            self.a = torch.randn(2048, 2048, device=device)
            self.gemms = max(1, round(self.seconds / _gemm_seconds(self.a)))
        if args.cause == "backward":
            params[-2].register_hook(self._burn)
        elif args.cause == "forward":
            model.register_forward_hook(lambda *_: self._burn(None))
        elif args.cause == "small_ops":
            model.register_forward_hook(lambda *_: self._small_ops())
        elif args.cause == "cpu_thread":
            threading.Thread(target=self._spin, daemon=True).start()
        elif args.cause == "slow_optimizer":
            self._optimizers = optimizers
            optimizers[0].register_step_pre_hook(self._unfuse)
        elif args.cause == "optimizer":
            optimizers[0].register_step_pre_hook(self._sleep)
        elif args.cause == "dataloader":
            fetch = loader.collate_fn

            def collate(batch):
                if self.on():
                    time.sleep(self.seconds)
                return fetch(batch)

            loader.collate_fn = collate

    def _sleep(self, *_):
        if self.on():
            time.sleep(self.seconds)

    def busy(self):
        """The calling thread busy for ``--cause-ms`` (spinning, as host preprocessing does)."""
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass

    def _small_ops(self):
        """Tiny operators, each dominated by dispatch overhead, for about ``--cause-ms``."""
        if self.on():
            x, end = torch.ones(4), time.perf_counter() + self.seconds
            while time.perf_counter() < end:
                for _ in range(50):
                    x = x + 1

    def _spin(self):
        """A Python thread beside training that holds the GIL in short bursts."""
        while True:
            if self.on():
                end = time.perf_counter() + 0.002
                while time.perf_counter() < end:
                    pass
            time.sleep(0.002)

    def _unfuse(self, *_):
        """From the cause step on, the single-tensor (for-loop) optimizer implementation."""
        if self.on():
            for opt in self._optimizers:
                for group in opt.param_groups:
                    group["foreach"] = False
                    group["fused"] = False

    def _burn(self, grad):
        """Matrix products for about ``--cause-ms`` (in the backward or forward pass)."""
        if self.on() and self.gemms:
            for _ in range(self.gemms):  # queued on the GPU: the host does not wait
                torch.mm(self.a, self.a)
        elif self.on():
            end = time.perf_counter() + self.seconds
            while time.perf_counter() < end:
                torch.mm(self.a, self.a)
        return grad


def _evaluate(model, tokens, seconds: float, agent) -> None:
    """An evaluation pass (a forward without gradients, then host time), marked as a pause."""
    import contextlib
    with agent.pause("eval") if agent is not None else contextlib.nullcontext():
        with torch.no_grad():
            model(tokens[:, :-1])
        time.sleep(seconds)


def main(argv=None) -> None:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    distributed = "RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        torch.distributed.init_process_group(args.backend or ("nccl" if args.device == "cuda" else "gloo"))
    device = torch.device(args.device, 0 if args.same_gpu else int(os.environ.get("LOCAL_RANK", 0))) \
        if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    agent = None
    if not args.no_agent:
        from stepwatch import agent
        agent.attach(samples_per_step=args.batch, tokens_per_step=args.batch * args.seq)
    torch.manual_seed(0)
    vocab = 256
    model = TinyLM(vocab, args.d_model, args.layers, args.seq).to(device)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    params = list(model.parameters())
    optimizers = [torch.optim.AdamW(params[:-2], lr=1e-3), torch.optim.AdamW(params[-2:], lr=1e-3)] \
        if args.two_optimizers else [torch.optim.AdamW(params, lr=1e-3)]
    data = RandomTokens(args.steps * args.batch, args.seq, vocab, args.load_delay_s)
    loader = DataLoader(data, batch_size=args.batch, num_workers=args.workers,
                        multiprocessing_context="fork" if args.workers else None)
    loss_fn = nn.CrossEntropyLoss()
    done = 0
    cause = _Cause(args, lambda: done, params, optimizers, loader, model, device)
    slow = _Slowdown(args, int(os.environ.get("RANK", "0")))
    loader = slow.wrap(loader)
    sessions, profiling = 0, False  # profiler sessions seen to close (--slow-after-session)
    for tokens in loader:
        if args.cause == "host_busy" and cause.on():
            cause.busy()  # host work of the training thread before forward (no GPU work queued)
        tokens = tokens.to(device)
        logits = model(tokens[:, :-1])
        loss = loss_fn(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.step_sleep_s:
            time.sleep(args.step_sleep_s)
        was, profiling = profiling, torch.autograd._profiler_enabled()
        sessions += was and not profiling
        if args.slow_after_session and sessions >= args.slow_after_session:
            time.sleep(args.slow_after_session_s)
        if args.cause == "loop_sleep" and cause.on():
            time.sleep(cause.seconds)  # host work between backward and the optimizer step
        if args.manual_update:
            with torch.no_grad():
                for p in params:
                    if p.grad is not None:
                        p.sub_(1e-3 * p.grad)
        else:
            for opt in optimizers:
                opt.step()
        done += 1
        if args.item:
            loss.item()
        slow.step_done(done)
        if args.eval_every and done % args.eval_every == 0:
            _evaluate(model, tokens, args.eval_s, None if args.no_agent else agent)
    if distributed:
        torch.distributed.destroy_process_group()
    print(f"trainer rank {os.environ.get('RANK', '0')}: {done} steps, last loss {loss.item():.3f}",
          flush=True)


if __name__ == "__main__":
    main()
