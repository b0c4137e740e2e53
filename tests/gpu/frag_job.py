"""CUDA job that fragments the caching allocator, for tests/gpu/test_fragmentation.py.

Fills the device to ``--fill`` (share of total memory, NVML's view) with held tensors of random
sizes between 1 and 10 MiB (the allocator packs these into 20 MiB segments and splits them),
frees a random half of them (holes inside segments that stay reserved: inactive split blocks),
then runs optimizer steps for ``--seconds`` that each allocate and free variable-size
temporaries and replace a few held tensors. With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
the same pattern leaves holes in one expandable segment; PyTorch does not count those as
inactive split (their free pages can always be unmapped), so the fragmentation ratio stays 0.
Writes the trainer's own final memory_stats to argv[1] as JSON.
"""

import argparse
import json
import random
import time

import torch

from stepwatch import agent

MIB = 2**20


def rand_bytes(rng: random.Random) -> int:
    return rng.randrange(1 * MIB + 4096, 10 * MIB - 4096, 512)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--fill", type=float, default=0.95)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--step-sleep-s", type=float, default=0.1)
    args = p.parse_args()
    agent.attach()
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    model = torch.nn.Linear(256, 256).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    rng = random.Random(0)
    held = []
    free, total = torch.cuda.mem_get_info(dev)
    margin = (1 - args.fill) * total
    while free > margin:
        for _ in range(64):
            held.append(torch.empty(rand_bytes(rng), dtype=torch.uint8, device=dev))
        free, total = torch.cuda.mem_get_info(dev)
    rng.shuffle(held)
    del held[: len(held) // 2]
    x = torch.randn(64, 256, device=dev)
    deadline, steps = time.monotonic() + args.seconds, 0
    while time.monotonic() < deadline:
        temps = [torch.empty(rand_bytes(rng), dtype=torch.uint8, device=dev) for _ in range(8)]
        for _ in range(4):  # variable-size tensors held across steps
            held[rng.randrange(len(held))] = torch.empty(rand_bytes(rng), dtype=torch.uint8, device=dev)
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del temps
        steps += 1
        time.sleep(args.step_sleep_s)
    torch.cuda.synchronize(dev)
    ms = torch.cuda.memory_stats(dev)
    keys = ("allocated_bytes.all.current", "reserved_bytes.all.current", "inactive_split_bytes.all.current",
            "num_alloc_retries", "num_ooms")
    json.dump({"steps": steps, "total": total, "free": torch.cuda.mem_get_info(dev)[0],
               **{k: ms.get(k, 0) for k in keys}}, open(args.out, "w"))


if __name__ == "__main__":
    main()
