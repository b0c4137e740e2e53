"""stepwatch for the Hugging Face ``transformers.Trainer``: ``callbacks=[StepwatchCallback()]``.

- attach at ``on_train_begin`` (``attach_options`` go to ``agent.attach``; an agent already
  attached by the script is kept);
- one ``agent.step`` per optimizer step at ``on_step_end`` with samples = per-device batch size
  x gradient accumulation steps, and tokens = the growth of ``state.num_input_tokens_seen``
  (set ``include_num_input_tokens_seen=True`` in the arguments, else no tokens), divided by the
  world size when the Trainer counts them over all processes;
- ``on_evaluate`` / ``on_predict`` mark "eval", ``on_save`` "checkpoint", ``on_log`` "log" (or
  "eval" for the evaluation's own metrics): each marks the step that phase delayed ("eval" or
  "checkpoint" replace "log" on the same step). The collector leaves a marked step out of
  detection only when the phase actually delayed it and its kind is not on most steps, so
  logging every step hides nothing.

Never raises into the Trainer.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from transformers import TrainerCallback

from stepwatch import agent

__all__ = ["StepwatchCallback"]

_log = logging.getLogger("stepwatch")


class StepwatchCallback(TrainerCallback):
    def __init__(self, **attach_options: Any):
        self._options = attach_options
        self._samples: Optional[int] = None
        self._tokens_seen: Optional[int] = None
        self._world = 1

    def on_train_begin(self, args, state, control, **kwargs):
        try:
            if agent.current() is None:
                agent.attach(**self._options)
            agent.use_explicit_steps()
            self._samples = int(args.per_device_train_batch_size) * int(args.gradient_accumulation_steps)
            self._world = max(1, int(getattr(args, "world_size", 1) or 1))
            self._tokens_seen = int(getattr(state, "num_input_tokens_seen", 0) or 0)
        except Exception as exc:  # an explicit bad option surfaces in attach(); nothing else may
            if isinstance(exc, agent.SettingsError):
                raise
            _log.warning("stepwatch: HF callback could not start: %r", exc)

    def on_step_end(self, args, state, control, **kwargs):
        tokens = None
        seen = getattr(state, "num_input_tokens_seen", None)
        if seen and self._tokens_seen is not None:
            tokens = max(0, int(seen) - self._tokens_seen) // self._world or None
            self._tokens_seen = int(seen)
        agent.step(samples=self._samples, tokens=tokens)

    def on_evaluate(self, args, state, control, **kwargs):
        agent.mark("eval")

    def on_predict(self, args, state, control, **kwargs):
        agent.mark("eval")

    def on_save(self, args, state, control, **kwargs):
        agent.mark("checkpoint")

    def on_log(self, args, state, control, logs=None, **kwargs):
        # evaluate() logs its metrics (eval_*) before on_evaluate: that step is an evaluation's
        agent.mark("eval" if logs and any(str(k).startswith("eval_") for k in logs) else "log")
