"""Which phase gets a training job's extra GPU work? The diagnosis jobs' model
(collector/tools/train.py TinyLM, d_model 512, 4 layers, batch 16 x 256 tokens, loss.item() every
step) profiled for 4 steps without and 4 steps with a cause (the same hooks as ``--cause``),
each trace analysed by the sidecar's window analysis and saved (gzip) for a closer look.

    python bench/phase_attribution.py --cause backward --out-dir OUT
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil

import torch
from torch import nn

from stepwatch.agent._sidecar._analysis import summarize
from stepwatch.collector.tools.train import TinyLM, _Cause


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cause", default="backward")
    p.add_argument("--cause-ms", type=float, default=6.0)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out-dir", default=".")
    a = p.parse_args()
    dev = torch.device(a.device)
    model = TinyLM(256, 512, 4, 256).to(dev)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3)
    done = 0
    args = argparse.Namespace(cause=a.cause, cause_rank=-1, cause_from_step=10**9, cause_ms=a.cause_ms)
    cause = _Cause(args, lambda: done, params, [opt], None, model, dev)
    tokens = torch.randint(0, 256, (16, 257), device=dev)
    loss_fn = nn.CrossEntropyLoss()

    last = []

    def step(prof=None):
        """train.py's loop order; the step boundary (prof.step) where the agent's optimizer
        post-hook puts it, so loss.item() opens the next profiled step."""
        if last:
            last.pop().item()
        batch = tokens.cpu().to(dev)  # a host batch copied to the device, as the DataLoader's
        logits = model(batch[:, :-1])
        loss = loss_fn(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if prof is not None:
            prof.step()
        last.append(loss)

    for label, on in (("without", False), ("with", True)):
        args.cause_from_step = 0 if on else 10**9
        for _ in range(30):
            step()
        path = os.path.join(a.out_dir, f"{a.cause}_{label}.json")
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if dev.type == "cuda" else [])
        with torch.profiler.profile(activities=acts, schedule=torch.profiler.schedule(wait=0, warmup=1, active=4),
                                    on_trace_ready=lambda prof: prof.export_chrome_trace(path)) as prof:
            for _ in range(5):
                step(prof)
        b = summarize(path).breakdown
        print(f"{a.cause} {label:8s} step {b.step_time_s * 1e3:6.2f} ms: forward {b.forward_s * 1e3:.2f} "
              f"backward {b.backward_s * 1e3:.2f} optimizer {b.optimizer_s * 1e3:.2f} "
              f"communication {b.communication_s * 1e3:.2f} other {b.other_s * 1e3:.2f}", flush=True)
        with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.remove(path)


if __name__ == "__main__":
    main()
