"""One rank of a 2-rank FSDP2 (``fully_shard``) job on CPU over gloo, with the agent's phase
timer and step tracker on it as the agent installs them; writes its phase records as JSON.

    python fsdp_phase_job.py RANK WORLD PORT OUT.json
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.optim.optimizer import register_optimizer_step_post_hook

from stepwatch.agent._dataloader import DataLoaderTimer
from stepwatch.agent._phase_times import PhaseTimer
from stepwatch.agent._steps import StepTracker


def main() -> None:
    rank, world, port, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    out = []
    dl = DataLoaderTimer()
    dl.install()
    tracker = StepTracker(out.append, dl, None, phases=PhaseTimer(dl, 1.0))  # every step sampled
    register_optimizer_step_post_hook(lambda o, a, k: tracker.on_optimizer_step(o))
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    data = torch.utils.data.DataLoader(torch.randn(1024, 16), batch_size=8)
    for i, x in enumerate(data):
        if i >= 16:
            break
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
    dl.uninstall()
    with open(out_path, "w") as fh:
        json.dump([r for r in out if r["t"] in ("phase_times", "step")], fh, default=str)
    print(f"done {rank}", flush=True)  # its work is done (torch's gloo teardown may still abort)


if __name__ == "__main__":
    main()
