"""How a contributor to a change reads: "backward +5.1 ms/step (aten::mm +4.8 ms)"."""

from __future__ import annotations

__all__ = ["fmt"]


def fmt(c: tuple) -> str:
    name, delta, detail = c
    return f"{name} {delta:+.1f} ms/step" + (f" ({detail})" if detail else "")


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[:limit - 3] + "..."

