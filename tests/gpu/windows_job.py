"""CUDA DDP (one GPU, NCCL) transformer job with frequent profiler windows, for tests/gpu."""

import os
import sys

import torch
from torch import nn

from stepwatch import agent

steps = int(sys.argv[1])
torch.distributed.init_process_group("nccl")
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
dev = torch.device("cuda", torch.cuda.current_device())
agent.attach(window_every_steps=64, overhead_budget=0.5, samples_per_step=16)
layer = nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True, dropout=0.0)
model = nn.parallel.DistributedDataParallel(nn.TransformerEncoder(layer, 6).to(dev))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(16, 512, 1024, device=dev)
for _ in range(steps):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
torch.distributed.destroy_process_group()
