"""Alerting: detection fed by applied batches (:class:`Detection`, a pipeline listener), the
alert lifecycle (:class:`AlertBook`), its metrics, and the Alertmanager v2 client."""

from ._alertmanager import AlertmanagerClient, payload
from ._book import Alert, AlertBook, AlertMetrics, iso
from ._detection import Detection, feed_batch

__all__ = ["Alert", "AlertBook", "AlertMetrics", "AlertmanagerClient", "Detection", "feed_batch",
           "iso", "payload"]
