"""CUDA training job for tests/gpu: a transformer with the agent attached, plus ground truth.

Writes JSON to argv[1]: synchronized wall time over a window of steps, the trainer's own
torch.cuda.memory_stats() after the last step, and NVML's memory reading taken directly.
"""

import json
import sys
import time

import torch

from stepwatch import agent
from stepwatch.collector.tools.train import transformer_step
from stepwatch.core.contract import normalize_uuid

out_path, steps = sys.argv[1], int(sys.argv[2])
window = (steps // 2, steps - 10)  # synchronized measurement from end of step a to end of b
agent.attach(samples_per_step=16, tokens_per_step=16 * 512)
torch.cuda.set_device(0)
dev = torch.device("cuda", 0)
train_step, _, _ = transformer_step(dev)
truth = {"window": window, "memory_log": []}
keys = ("allocated_bytes.all.current", "reserved_bytes.all.current", "active_bytes.all.current",
        "inactive_split_bytes.all.current")
for step in range(1, steps + 1):
    # As in a plain loop, exactly the current loss tensor is alive both while the agent's hook
    # samples memory_stats inside train_step() and when this loop samples it just after.
    loss = None
    loss = train_step()
    # The agent samples memory_stats inside opt.step()'s post-hook; nothing allocates between
    # that and this line, so this is the allocator state the agent saw at this step.
    stats = torch.cuda.memory_stats(0)
    truth["memory_log"].append([time.time()] + [stats[k] for k in keys])
    if step == window[0]:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
    if step == window[1]:
        torch.cuda.synchronize()
        truth["window_wall_s"] = time.perf_counter() - t0
torch.cuda.synchronize()
stats = torch.cuda.memory_stats(0)
truth["memory_stats"] = {k: stats[k] for k in ("allocated_bytes.all.current", "reserved_bytes.all.current",
                                               "active_bytes.all.current", "inactive_split_bytes.all.current")}
import pynvml  # noqa: E402

pynvml.nvmlInit()
# the trainer's own device by its UUID: NVML's indices ignore CUDA_VISIBLE_DEVICES (index 0 was
# another job's GPU when this ran on GPU 2 of a 4-GPU machine: "315% apart")
handle = pynvml.nvmlDeviceGetHandleByUUID(normalize_uuid(torch.cuda.get_device_properties(0).uuid))
truth["nvml_used_bytes"] = pynvml.nvmlDeviceGetMemoryInfo(handle).used
truth["uuid"] = pynvml.nvmlDeviceGetUUID(handle)
truth["uuid"] = truth["uuid"].decode() if isinstance(truth["uuid"], bytes) else truth["uuid"]
# Keep the memory held while the sidecar samples NVML a few more times.
time.sleep(3.0)
truth["nvml_used_bytes_after"] = pynvml.nvmlDeviceGetMemoryInfo(handle).used
with open(out_path, "w") as fh:
    json.dump(truth, fh)
