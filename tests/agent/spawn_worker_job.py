"""attach() at the top of a script whose DataLoader uses spawned workers (each re-imports this
module): only the trainer gets an agent. Prints the pids that started a sidecar session."""

import os

from stepwatch import agent

agent.attach(job="spawn-workers")

import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402


class Numbers(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor([float(i)])


if __name__ == "__main__":
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Numbers(), batch_size=8, num_workers=2, multiprocessing_context="spawn")
    for x in loader:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
    from stepwatch.agent import _api
    print("trainer", os.getpid(), "agent" if _api._agent is not None else "none", flush=True)
    agent.detach()
