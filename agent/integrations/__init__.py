"""Framework integrations, imported lazily (no hard dependency on transformers or lightning):

    from stepwatch.integrations.hf import StepwatchCallback        # transformers.Trainer
    trainer = Trainer(..., callbacks=[StepwatchCallback()])

    from stepwatch.integrations.lightning import StepwatchCallback  # lightning.Trainer
    trainer = lightning.Trainer(..., callbacks=[StepwatchCallback()])

Each attaches the agent when training begins (keyword arguments go to ``agent.attach``),
reports samples and tokens per optimizer step, and marks evaluation ("eval"), checkpoint
("checkpoint") and logging ("log") phases so the collector counts them as pauses and never
reads them as a slowdown. Per step they add one call to ``agent.step`` and nothing else.
"""

__all__ = ["hf", "lightning"]
