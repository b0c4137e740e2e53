"""stepwatch agent: ``from stepwatch import agent; agent.attach()`` in a training script.

Importing this package is cheap (torch is imported by attach()).
"""

from ._api import Agent, attach, check_options, detach, mark, pause, step
from .settings import SettingsError

__all__ = ["attach", "step", "mark", "pause", "detach", "check_options", "Agent", "SettingsError"]
