"""Record small real profiler traces (3-step windows) of a DDP transformer step on one GPU.

Used to produce the fixtures under tests/data/traces/ that the window analysis is checked
against (Holistic Trace Analysis on the same files). Run on a CUDA machine:

    torchrun --standalone --nproc-per-node=1 bench/record_traces.py OUTDIR
"""

import gzip
import os
import shutil
import sys

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.distributed.init_process_group("nccl")
rank = torch.distributed.get_rank()
torch.cuda.set_device(rank)
dev = torch.device("cuda", rank)
layer = nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True, dropout=0.0)
model = nn.parallel.DistributedDataParallel(nn.TransformerEncoder(layer, 2).to(dev))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(4, 128, 256, device=dev)


def train_step():
    with record_function("## forward ##"):
        loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    with record_function("## backward ##"):
        loss.backward()
    with record_function("## optimizer ##"):
        opt.step()


for _ in range(5):
    train_step()
torch.cuda.synchronize()
for name, acts in (("cuda_only", [ProfilerActivity.CUDA]),
                   ("cpu_cuda", [ProfilerActivity.CPU, ProfilerActivity.CUDA])):
    for attempt in range(2):  # the first window warms CUPTI up; keep the second
        path = os.path.join(out, f"{name}_rank{rank}.json")
        with profile(activities=acts, schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                     on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
            for _ in range(4):
                train_step()
                prof.step()
    with open(path, "rb") as src, gzip.open(path + ".gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(path)
    print(name, os.path.getsize(path + ".gz"), "bytes gz")
torch.distributed.destroy_process_group()
