"""Declared: a component's metric families, registered with the collector's registry as every
other component's are (the alert book's :class:`AlertMetrics`, the trace store's
:class:`TraceStoreMetrics`: prometheus_client collectors). A component declares its families as
plain data, ``families() -> [(name, help, kind, [(label names, label values, value)])]`` (kind
counter, gauge or histogram; a histogram's value ``(cumulative [(le, count)], sum)``), so that it
needs no Prometheus import of its own; ``Declared(source).register(registry)`` makes them a
collector. Families with no rows are left out. The ranks' own series are the one other path:
:class:`RankMetrics` renders them from one read of the state, in chunks (10,000 ranks are 300,000
series), on the scrape's thread or in its render process."""

from __future__ import annotations

from typing import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = ["Declared"]


class Declared(Collector):
    """``source``: a component's ``families`` (the declared form above), called at each scrape
    on the scrape's thread."""

    def __init__(self, source: Callable[[], list]):
        self._source = source

    def register(self, registry: CollectorRegistry) -> "Declared":
        registry.register(self)
        return self

    def collect(self) -> Iterator[Metric]:
        for name, doc, kind, rows in self._source():
            if not rows:
                continue
            metric = Metric(name, doc, kind)
            sample = metric.name + "_total" if kind == "counter" else metric.name
            for names, values, value in rows:
                labels = dict(zip(names, values))
                if kind == "histogram":
                    cumulative, total = value
                    count = 0
                    for le, count in cumulative:
                        metric.add_sample(name + "_bucket", {**labels, "le": le}, count)
                    metric.add_sample(name + "_count", labels, count)
                    metric.add_sample(name + "_sum", labels, total)
                else:
                    metric.add_sample(sample, labels, value)
            yield metric
