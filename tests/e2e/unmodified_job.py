"""An unmodified DDP training script (gloo, 2 processes under torchrun) whose DataLoader starts
spawned workers: stepwatch run must attach to the two trainers and to nothing else."""

import os, torch, torch.distributed as dist
from torch.utils.data import DataLoader


def main():
    dist.init_process_group("gloo")
    m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    data = DataLoader(torch.randn(400, 8), batch_size=4, num_workers=2, multiprocessing_context="spawn")
    for x in data:
        m(x).sum().backward(); opt.step(); opt.zero_grad()
    dist.destroy_process_group()
    print("done", os.environ.get("RANK"), flush=True)


if __name__ == "__main__":
    main()
