"""Prometheus text exposition (0.0.4 and OpenMetrics 1.0) written line by line.

prometheus_client builds a ``Sample`` with a label dict per series and escapes every label on
every scrape: about 25 us per series on a loaded core, 7-11 s for 10,000 ranks. Here a rank's
label pairs are rendered once (``labels_text``, cached by value) and each series is one
f-string. :class:`Family` keeps finished lines (an entry may hold several: one histogram's);
:func:`render` adds the HELP/TYPE headers.
"""

from __future__ import annotations

from typing import Iterable, Sequence

__all__ = ["Family", "render", "labels_text", "number"]

_INF = float("inf")


def _escape(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        value = value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def labels_text(names: Sequence[str], values: Sequence) -> str:
    """``a="x",b="y"`` (values escaped), to be joined inside braces."""
    return ",".join(f'{n}="{_escape(str(v))}"' for n, v in zip(names, values))


def number(value) -> str:
    kind = type(value)
    if kind is float and value - value == 0.0:  # finite
        return repr(value)
    if kind is int:
        return str(value)
    value = float(value)
    if value != value:
        return "NaN"
    if value == _INF:
        return "+Inf"
    if value == -_INF:
        return "-Inf"
    return repr(value)


class Family:
    """One metric family. ``kind``: counter, gauge, histogram or info. Counter samples are
    named ``<name>_total`` and info samples ``<name>_info``, as both formats want."""

    __slots__ = ("name", "doc", "kind", "lines", "_sample")

    def __init__(self, name: str, doc: str, kind: str):
        self.name, self.doc, self.kind, self.lines = name, doc, kind, []
        self._sample = name + {"counter": "_total", "info": "_info"}.get(kind, "")

    def add(self, labels: str, value, extra: str = "") -> None:
        """One series; ``labels`` as from :func:`labels_text`, ``extra`` more pairs after them."""
        if extra:
            labels = f"{labels},{extra}" if labels else extra
        # (a finite float, the usual value, without the call: 10,000 ranks are 300,000 series)
        text = repr(value) if type(value) is float and value - value == 0.0 else number(value)
        self.lines.append(f"{self._sample}{{{labels}}} {text}\n" if labels else f"{self._sample} {text}\n")

    def add_column(self, labels: list, values: list, extra: str = "") -> None:
        """:meth:`add` for each pair whose value is not None, in one comprehension (``labels``
        non-empty; ``extra``: more pairs after them, the same for all)."""
        head, tail = self._sample + "{", f",{extra}}} " if extra else "} "
        self.lines += [f"{head}{lab}{tail}{repr(v) if type(v) is float and v - v == 0.0 else number(v)}\n"
                       for lab, v in zip(labels, values) if v is not None]

    def add_totals(self, labels: list, counts: list, sums: list) -> None:
        """A histogram per label set of its +Inf bucket, count and sum only, in one
        comprehension; label sets with no observation are left out."""
        name = self.name
        self.lines += [f'{name}_bucket{{{lab},le="+Inf"}} {n}\n{name}_count{{{lab}}} {n}\n'
                       f"{name}_sum{{{lab}}} {number(total)}\n" for lab, n, total in zip(labels, counts, sums) if n]

    def add_histogram(self, labels: str, cumulative: Iterable[tuple[str, int]], total: float,
                      buckets: bool = True) -> None:
        """``cumulative`` = ``[(le, count)]`` ending with ``("+Inf", n)``; ``buckets=False``
        keeps only the +Inf bucket (a valid histogram, three series)."""
        pre = f"{labels}," if labels else ""
        out, count = self.lines, 0
        for le, count in cumulative:
            if buckets or le == "+Inf":
                out.append(f'{self.name}_bucket{{{pre}le="{le}"}} {count}\n')
        br = f"{{{labels}}}" if labels else ""
        out.append(f"{self.name}_count{br} {count}\n")
        out.append(f"{self.name}_sum{br} {number(total)}\n")


def render(families: Iterable[Family], openmetrics: bool = False) -> str:
    """The families with samples, headers first; no ``# EOF`` (the caller ends the body)."""
    out = []
    for fam in families:
        if not fam.lines:
            continue
        if openmetrics:
            head, kind = fam.name, fam.kind
        else:
            head, kind = fam._sample, "gauge" if fam.kind == "info" else fam.kind
        doc = fam.doc.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {head} {doc}\n# TYPE {head} {kind}\n")
        out.extend(fam.lines)
    return "".join(out)
