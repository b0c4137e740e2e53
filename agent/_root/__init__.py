"""stepwatch: a continuous production profiler for PyTorch training.

``stepwatch.agent`` runs in the training process (``from stepwatch import agent;
agent.attach()``), ``stepwatch.collector`` is the collector daemon, ``stepwatch.integrations``
holds the Hugging Face and Lightning callbacks. Each is imported on first use, so
``import stepwatch`` alone loads nothing else and ``stepwatch.agent.attach()`` works after it.
(This file is the root package; pyproject maps it from agent/_root.)
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["agent", "collector", "integrations", "proto"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
