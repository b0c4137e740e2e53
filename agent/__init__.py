"""stepwatch agent: ``from stepwatch import agent; agent.attach()`` in a training script.

Importing this package is cheap (torch is imported by attach()).
"""

from ._api import Agent, attach, begin_pause, check_options, current, detach, end_pause, mark, pause, step, use_explicit_steps
from stepwatch.core.settings import SettingsError

__all__ = ["attach", "step", "mark", "pause", "begin_pause", "end_pause", "detach", "current",
           "use_explicit_steps", "check_options", "Agent", "SettingsError"]
