"""GPM probe job: bf16 GEMM training steps for --busy-s, then idle (attached, no GPU work) for
--idle-s. Writes the phase times (Unix seconds) to the JSON file named first."""

import json
import sys
import time

import torch

from stepwatch import agent


def main(out: str, busy_s: float, idle_s: float) -> None:
    agent.attach(nvml_interval_s=0.5, windows=False)
    dev = torch.device("cuda", 0)
    w = torch.nn.Parameter(torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16))
    x = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    opt = torch.optim.SGD([w], lr=1e-6)
    for _ in range(3):
        (x @ w).float().mean().backward()
        opt.step()
    torch.cuda.synchronize()
    busy0 = time.time()
    while time.time() - busy0 < busy_s:
        for _ in range(8):
            y = x @ w
        y.float().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()  # keep the host from running ahead of the phase clock
    busy1 = time.time()
    time.sleep(idle_s)
    with open(out, "w") as fh:
        json.dump({"busy": [busy0, busy1], "idle": [busy1, time.time()]}, fh)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))
