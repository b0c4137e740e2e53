"""CUDA job that captures its whole training step (forward, backward, a capturable Adam step)
into one CUDA graph, as PyTorch's documentation shows, with the agent attached and every step
sampled for phase times (so the agent's hooks fire inside the capture), then replays the
graph, calling agent.step() after each replay. Writes JSON to argv[1]."""

import json
import sys

import torch
from torch import nn

from stepwatch import agent

out_path, replays = sys.argv[1], int(sys.argv[2])
agent.attach(samples_per_step=256)
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 1024)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-4, capturable=True)
static_x = torch.randn(256, 1024, device=dev)

side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # warm-up iterations on a side stream, as before any capture
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        model(static_x).pow(2).mean().backward()
        opt.step()
torch.cuda.current_stream().wait_stream(side)

graph = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
with torch.cuda.graph(graph):
    static_loss = model(static_x).pow(2).mean()
    static_loss.backward()
    opt.step()

losses = []
for i in range(replays):
    static_x.copy_(torch.randn(256, 1024, device=dev))
    graph.replay()
    agent.step()
    if i % 50 == 0:
        losses.append(static_loss.item())
torch.cuda.synchronize()
agent.detach()
with open(out_path, "w") as fh:
    json.dump({"warmup_steps": 3, "replays": replays, "losses": losses}, fh)
