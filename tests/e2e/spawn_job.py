"""An mp.spawn training script: no launcher, so no RANK in the environment; each spawned
process learns its rank from mp.spawn and passes it to init_process_group. ``--attach`` calls
agent.attach() in each process *before* init_process_group (the rank is unknown then)."""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

STEPS = 60


def work(rank: int, world: int, attach: bool, port: str) -> None:
    if attach:
        from stepwatch import agent
        agent.attach()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(STEPS):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
    sys.stdout.write(f"done {rank}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    mp.spawn(work, args=(2, "--attach" in sys.argv, sys.argv[1]), nprocs=2)
