"""CloudWatch Logs' metric extraction from Embedded Metric Format lines, emulated for the local
stack (moto does not read logs).

The deployed front and instances write their metrics as EMF lines to their logs (the Lambda's log
group; on EC2 stdout, which the CloudWatch agent ships) and CloudWatch extracts them; locally each
writes the same lines to a file of its own (``SKINFLINT_EMF_FILE``) and :class:`EmfExtractor` tails
every file matching a pattern and puts every series it extracts into moto's CloudWatch as a statistic
set, so the control loop and the report read those metrics as they would on AWS. Its own
PutMetricData calls stand in for CloudWatch's extraction and are not metered (the writers make none:
their bill is the log bytes)."""

from __future__ import annotations

import glob
import json
import logging
import math
import threading
from collections import defaultdict
from typing import Any

from core.adapters.metrics import put_calls
from skinflint.local.moto_server import EMULATION_HEADER

__all__ = ["EmfExtractor", "emulation_client", "metric_data"]

log = logging.getLogger(__name__)


def emulation_client(client: Any) -> Any:
    """``client`` (boto3) marked as a stand-in for AWS itself (this module's extraction, the fleet
    emulator's Auto Scaling, skinflint/local/fleet.py): each request carries
    :data:`~skinflint.local.moto_server.EMULATION_HEADER`, so the local server's request meter
    counts it apart from the components' requests (the demo's requests per frame leave it out)."""

    def mark(request: Any, **_: Any) -> None:
        request.headers[EMULATION_HEADER] = "emf-extraction"

    client.meta.events.register("before-sign", mark)
    return client


def _statistics(value: Any) -> tuple[float, float, float, float]:
    """(count, sum, min, max) of one EMF value: a number, an array of numbers or a value set."""
    if isinstance(value, dict):
        return float(value["Count"]), float(value["Sum"]), float(value["Min"]), float(value["Max"])
    if isinstance(value, list):
        xs = [float(number) for number in value]
        return float(len(xs)), math.fsum(xs), min(xs), max(xs)
    number = float(value)
    return 1.0, number, number, number


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
            dims = [{"Name": key, "Value": str(doc[key])} for key in keys]
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
    """Tails every file matching ``pattern`` (a glob; files may appear later) every ``poll_s`` and
    puts the series of every whole EMF line into ``client``'s CloudWatch (:func:`metric_data`). A
    line that is not valid EMF is counted in ``invalid`` and logged, as CloudWatch would keep it as a
    plain log event; a failed PutMetricData is retried at the next poll (the series stay pending).
    :meth:`stop` extracts what is left."""

    def __init__(self, pattern: str, client: Any, poll_s: float = 1.0):
        self.pattern = pattern
        self._cw = client
        self.poll_s = poll_s
        self._offsets: dict[str, int] = {}
        self._pending: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.lines = 0
        self.invalid = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def extract(self) -> int:
        """Read the new whole lines of every file and put their series; returns the lines read."""
        with self._lock:
            lines = sum(self._read(path) for path in sorted(glob.glob(self.pattern)))
            self._put()
            return lines

    def _read(self, path: str) -> int:
        offset = self._offsets.get(path, 0)
        try:
            with open(path, "rb") as file:
                file.seek(offset)
                chunk = file.read()
        except FileNotFoundError:
            return 0
        end = chunk.rfind(b"\n") + 1  # whole lines only: a line being written is read next time
        lines = 0
        for raw in chunk[:end].splitlines():
            if not raw.strip():
                continue
            lines += 1
            try:
                for namespace, data in metric_data(json.loads(raw)).items():
                    self._pending[namespace] += data
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                self.invalid += 1
                log.warning("%s: not an EMF document (%s): %.120s", path, exc, raw.decode(errors="replace"))
        self._offsets[path] = offset + end
        self.lines += lines
        return lines

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
        self.extract()
