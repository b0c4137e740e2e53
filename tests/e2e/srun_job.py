"""A DDP script for srun, unmodified for stepwatch: each task takes its rank from SLURM
(SLURM_PROCID / SLURM_NTASKS), as SLURM training scripts do."""

import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}",
                        rank=int(os.environ["SLURM_PROCID"]), world_size=int(os.environ["SLURM_NTASKS"]))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(50):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
sys.stdout.write(f"done {dist.get_rank() if dist.is_initialized() else os.environ['SLURM_PROCID']}\n")
sys.stdout.flush()
