"""CUDA job with two optimizers stepped one after the other each iteration, the agent at its
defaults (the phase budget from the environment). The second optimizer is a for-loop AdamW over
many small parameters, so its step is long and launch-bound. Writes JSON to argv[1]: the
iterations run and each optimizer's step time measured afterwards with synchronize."""

import json
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from stepwatch import agent

out_path, iterations = sys.argv[1], int(sys.argv[2])


class Batches(Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        return torch.randn(1024)


dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
big = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(8)]).to(dev)
small = nn.ModuleList([nn.Linear(32, 32) for _ in range(120)]).to(dev)
lead = torch.optim.AdamW(big.parameters(), lr=1e-4, fused=True)
trail = torch.optim.AdamW(small.parameters(), lr=1e-4, foreach=False)  # ~10 kernels per tensor
loader = DataLoader(Batches(), batch_size=256, num_workers=0, pin_memory=True)
agent.attach(samples_per_step=256)


def forward(x):
    h = big(x)
    y = h[:, :32]
    for layer in small:
        y = layer(y)
    return h.pow(2).mean() + y.pow(2).mean()


done = 0
for x in loader:
    loss = forward(x.to(dev, non_blocking=True))
    lead.zero_grad(set_to_none=True)
    trail.zero_grad(set_to_none=True)
    loss.backward()
    lead.step()
    trail.step()
    loss.item()
    done += 1
    if done == iterations:
        break
agent.detach()


def timed(opt, n=20):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        opt.step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


with open(out_path, "w") as fh:
    json.dump({"iterations": done, "lead_step_s": timed(lead), "trail_step_s": timed(trail)}, fh)
