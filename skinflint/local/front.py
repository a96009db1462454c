"""The front under uvicorn (local stack): ``uvicorn skinflint.local.front:app``.

With ``SKINFLINT_METRICS_SINK=emf`` (the local stack sets it, with ``SKINFLINT_EMF_FILE``), the front
writes its metrics as Embedded Metric Format lines to that file after every request, as the Lambda
front writes them to its log after every invocation (``functions/front.py``), and makes no
PutMetricData call; the local stack's ``skinflint.local.emf.EmfExtractor`` plays CloudWatch's
extraction. Otherwise the metrics go to PutMetricData every ``SKINFLINT_METRICS_FLUSH_S``."""

from __future__ import annotations

import atexit
from typing import Any

from core.adapters.metrics import EmfMetrics
from core.errors import MetricsError
from front.app import create_app
from front.wiring import service_from_config


class FlushAfterRequest:
    """ASGI middleware: flush EMF metrics when each HTTP request has been answered (the outermost
    layer, so the request's own usage counts are in the flush); PutMetricData metrics flush on their
    own thread."""

    def __init__(self, app: Any, holder: dict[str, Any]):
        self.app = app
        self.holder = holder

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            svc = self.holder.get("svc")
            if scope.get("type") == "http" and svc is not None and isinstance(svc.metrics, EmfMetrics):
                try:
                    svc.metrics.flush()
                except MetricsError:
                    pass  # best effort, as in the Lambda handler


def _service() -> Any:
    svc = service_from_config()
    if isinstance(svc.metrics, EmfMetrics):
        atexit.register(_close, svc)  # after uvicorn's shutdown: the usage counts still held
    return svc


def _close(svc: Any) -> None:
    try:
        svc.metrics.close()
    except MetricsError:
        pass


# warmed at startup: the first frame does not pay for the clients, routers and connections
app = create_app(_service, warm=True)
app.add_middleware(FlushAfterRequest, holder=app.state.service_holder)
