"""The tiny Hugging Face Trainer job with ``logging_steps=1`` (every step is marked "log" by the
callback), slowed from optimizer step 200 on: each step sleeps 30 ms, then 80 ms (a host-side
slowdown such as a slower input pipeline; about +140%, far above a loaded 2-core machine's
noise). argv: output dir."""

import sys
import time

from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

from hf_job import Tokens
from stepwatch.integrations.hf import StepwatchCallback


class Slow(TrainerCallback):
    def on_step_begin(self, args, state, control, **kwargs):
        time.sleep(0.08 if state.global_step >= 200 else 0.03)


def main():
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
    args = TrainingArguments(output_dir=sys.argv[1], max_steps=400, per_device_train_batch_size=4,
                             logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                             dataloader_num_workers=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(2000), callbacks=[Slow(), StepwatchCallback()])
    trainer.train()


if __name__ == "__main__":
    main()
