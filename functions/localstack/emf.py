"""CloudWatch Logs' metric extraction from Embedded Metric Format lines, emulated for the local
stack (moto does not read logs).

The deployed front writes its metrics as EMF lines to its log group (``functions/front/handler.py``)
and CloudWatch extracts them; the local front writes the same lines to a file
(``SKINFLINT_EMF_FILE``, ``functions/front/local.py``) and :class:`EmfExtractor` tails it and puts
every series it extracts into moto's CloudWatch as a statistic set, so the control loop and the report
read the front's metrics exactly as they would on AWS. Its own PutMetricData calls stand in for
CloudWatch's extraction and are not metered (the front makes none: its bill is the log bytes)."""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections import defaultdict
from typing import Any

from functions.adapters.metrics import put_calls

__all__ = ["EmfExtractor", "metric_data"]

log = logging.getLogger(__name__)


def _statistics(value: Any) -> tuple[float, float, float, float]:
    """(count, sum, min, max) of one EMF value: a number, an array of numbers or a value set."""
    if isinstance(value, dict):
        return float(value["Count"]), float(value["Sum"]), float(value["Min"]), float(value["Max"])
    if isinstance(value, list):
        xs = [float(x) for x in value]
        return float(len(xs)), math.fsum(xs), min(xs), max(xs)
    x = float(value)
    return 1.0, x, x, x


def metric_data(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """PutMetricData entries (statistic sets) per namespace for one EMF document, as CloudWatch
    extracts it: each directive's metrics under each of its dimension sets, the dimension values
    from the document's root. Raises KeyError, TypeError or ValueError for a document that is not
    valid EMF (CloudWatch keeps such a line as a plain log event)."""
    meta = doc["_aws"]
    at = float(meta["Timestamp"]) / 1000.0
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for directive in meta["CloudWatchMetrics"]:
        for keys in directive["Dimensions"]:
            dims = [{"Name": k, "Value": str(doc[k])} for k in keys]
            for metric in directive["Metrics"]:
                count, total, low, high = _statistics(doc[metric["Name"]])
                stats = {"SampleCount": count, "Sum": total, "Minimum": low, "Maximum": high}
                out[directive["Namespace"]].append(
                    {
                        "MetricName": metric["Name"],
                        "Dimensions": dims,
                        "Unit": metric.get("Unit", "None"),
                        "Timestamp": at,
                        "StatisticValues": stats,
                    }
                )
    return dict(out)


class EmfExtractor:
    """Tails ``path`` every ``poll_s`` and puts the series of every whole EMF line into ``client``'s
    CloudWatch (:func:`metric_data`). A line that is not valid EMF is counted in ``invalid`` and
    logged, as CloudWatch would keep it as a plain log event; a failed PutMetricData is retried at
    the next poll (the lines stay pending). :meth:`stop` extracts what is left."""

    def __init__(self, path: str, client: Any, poll_s: float = 0.25):
        self.path = path
        self._cw = client
        self.poll_s = poll_s
        self._offset = 0
        self._pending: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.lines = 0
        self.invalid = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def extract(self) -> int:
        """Read the new whole lines and put their series; returns the lines read."""
        with self._lock:
            n = self._read()
            self._put()
            return n

    def _read(self) -> int:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return 0
        end = chunk.rfind(b"\n") + 1  # whole lines only: a line being written is read next time
        n = 0
        for raw in chunk[:end].splitlines():
            if not raw.strip():
                continue
            n += 1
            try:
                for namespace, data in metric_data(json.loads(raw)).items():
                    self._pending[namespace] += data
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                self.invalid += 1
                log.warning("not an EMF document (%s): %.120s", exc, raw.decode(errors="replace"))
        self._offset += end
        self.lines += n
        return n

    def _put(self) -> None:
        for namespace in list(self._pending):
            for call in put_calls(self._pending[namespace]):
                self._cw.put_metric_data(Namespace=namespace, MetricData=call)
                del self._pending[namespace][: len(call)]
            del self._pending[namespace]

    def start(self) -> EmfExtractor:
        def loop() -> None:
            while not self._stop.wait(self.poll_s):
                try:
                    self.extract()
                except Exception as exc:  # noqa: BLE001 - moto busy or stopping: the lines stay pending
                    log.warning("EMF extraction failed, retried next poll: %s", exc)

        self._thread = threading.Thread(target=loop, name="emf-extractor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling and extract what is left (the writer has stopped)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if os.path.exists(self.path):
            self.extract()
