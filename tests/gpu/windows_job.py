"""CUDA DDP (one GPU, NCCL) transformer job with frequent profiler windows, for tests/gpu."""

import os
import sys

import torch

from stepwatch import agent
from stepwatch.collector.tools.train import transformer_step

steps = int(sys.argv[1])
torch.distributed.init_process_group("nccl")
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
dev = torch.device("cuda", torch.cuda.current_device())
agent.attach(windows="scheduled", window_every_steps=64, overhead_budget=0.5, samples_per_step=16)
step, _, _ = transformer_step(dev, ddp=True)
for _ in range(steps):
    step()
torch.cuda.synchronize()
torch.distributed.destroy_process_group()
