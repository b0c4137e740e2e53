"""stepwatch for Lightning (``lightning`` or ``pytorch_lightning``): ``callbacks=[StepwatchCallback()]``.

- attach at ``setup`` (each process, after Lightning set up its process group, so the rank
  comes from ``torch.distributed``); ``attach_options`` go to ``agent.attach``;
- one ``agent.step`` per optimizer step at ``on_train_batch_end`` (every
  ``accumulate_grad_batches`` batches), with the samples of the batches since the last step
  and their tokens: ``tokens_per_sample`` if given, else the element count of an integer
  ``input_ids`` tensor (a dict batch) or of an integer 2-D batch tensor;
- validation runs inside a marked "eval" pause, a checkpoint marks "checkpoint".

Never raises into the Trainer.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback

from stepwatch import agent

__all__ = ["StepwatchCallback"]

_log = logging.getLogger("stepwatch")


def _batch_size(batch: Any) -> tuple[Optional[int], Optional[int]]:
    """(samples, tokens) of one batch, None where unknown."""
    first = batch
    if isinstance(batch, dict):
        first = batch.get("input_ids", next(iter(batch.values()), None))
    elif isinstance(batch, (list, tuple)) and batch:
        first = batch[0]
    shape = getattr(first, "shape", None)
    if not shape:
        return None, None
    integer = not getattr(first, "is_floating_point", lambda: True)()
    tokens = int(first.numel()) if integer and len(shape) == 2 else None
    return int(shape[0]), tokens


class StepwatchCallback(Callback):
    def __init__(self, tokens_per_sample: Optional[int] = None, **attach_options: Any):
        self._options = attach_options
        self._tokens_per_sample = tokens_per_sample
        self._samples = 0
        self._tokens: Optional[int] = 0
        self._in_eval = False

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit":
            return
        try:
            if agent.current() is None:
                agent.attach(**self._options)
            agent.use_explicit_steps()
        except agent.SettingsError:
            raise
        except Exception as exc:
            _log.warning("stepwatch: Lightning callback could not start: %r", exc)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        try:
            samples, tokens = _batch_size(batch)
        except Exception:
            samples, tokens = None, None
        if self._tokens_per_sample and samples:
            tokens = samples * self._tokens_per_sample
        self._samples += samples or 0
        self._tokens = self._tokens + tokens if self._tokens is not None and tokens else None
        accumulate = max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1))
        if (batch_idx + 1) % accumulate == 0:
            agent.step(samples=self._samples or None, tokens=self._tokens or None)
            self._samples, self._tokens = 0, 0

    def on_validation_start(self, trainer, pl_module) -> None:
        if not getattr(trainer, "sanity_checking", False) and not self._in_eval:
            self._in_eval = True
            agent.begin_pause("eval")

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._in_eval:
            self._in_eval = False
            agent.end_pause()

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        agent.mark("checkpoint")
