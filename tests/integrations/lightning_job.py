"""A tiny Lightning job: DDP over 2 CPU processes (gloo) with stepwatch's callback; validation
every 10 steps. Lightning's launcher sets LOCAL_RANK / NODE_RANK / WORLD_SIZE, not RANK."""

import lightning as L
import torch
from torch import nn

from stepwatch.integrations.lightning import StepwatchCallback


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(64, 16)
        self.head = nn.Linear(16, 64)

    def forward(self, x):
        return self.head(self.emb(x))

    def training_step(self, batch, batch_idx):
        logits = self(batch[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, 64), batch[:, 1:].reshape(-1))

    def validation_step(self, batch, batch_idx):
        self.training_step(batch, batch_idx)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main():
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, 64, (256, 12), generator=g)
    train = torch.utils.data.DataLoader(data, batch_size=4)
    val = torch.utils.data.DataLoader(data[:16], batch_size=4)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=30, val_check_interval=10,
                        num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[StepwatchCallback()])
    trainer.fit(Model(), train, val)


if __name__ == "__main__":
    main()
