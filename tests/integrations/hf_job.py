"""A tiny Hugging Face Trainer job on CPU with stepwatch's callback (no download: the model is
built from a config). argv: output dir."""

import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from stepwatch.integrations.hf import StepwatchCallback


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seq=16, vocab=64):
        g = torch.Generator().manual_seed(0)
        self.data = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return {"input_ids": self.data[i], "labels": self.data[i]}


def main():
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
    args = TrainingArguments(output_dir=sys.argv[1], max_steps=40, per_device_train_batch_size=4,
                             gradient_accumulation_steps=2, eval_strategy="steps", eval_steps=10,
                             save_strategy="steps", save_steps=25, logging_steps=1000,
                             include_num_input_tokens_seen=True, report_to=[], use_cpu=True,
                             dataloader_num_workers=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(400), eval_dataset=Tokens(16),
                      callbacks=[StepwatchCallback()])
    trainer.train()


if __name__ == "__main__":
    main()
