"""A GPU job of about 63 s with windows every 10 s (default budget), for test_short_job_gpu.py."""

import sys
import time

import torch

from stepwatch import agent
from stepwatch.collector.tools.train import transformer_step

seconds = float(sys.argv[1])
torch.cuda.set_device(0)
agent.attach(windows="scheduled", window_interval_s=10)
step, _, _ = transformer_step(torch.device("cuda", 0))
start = time.monotonic()
while time.monotonic() - start < seconds:
    step()
torch.cuda.synchronize()
