"""AWS Lambda entry point of the front API (API Gateway -> Mangum -> FastAPI).

Lean on purpose: boto3 clients are built on the first request, not at import. Logs are JSON lines
with the frame's request id (functions/telemetry.py). Metrics are flushed at the end of each
invocation (no background thread survives a frozen Lambda) as Embedded Metric Format log lines
(``EmfMetrics``): a PutMetricData call per invocation would cost more than the API Gateway request
and could be throttled at high request rates, which would under-count ``FramesAccepted`` and so
under-provision the fleet (docs/dataplane.md, "Metrics")."""

from __future__ import annotations

from typing import Any

from mangum import Mangum

from front.app import create_app
from front.wiring import service_from_config
from functions.telemetry import entry_point, logger

__all__ = ["app", "handler"]

app = create_app(lambda: service_from_config(background_metrics=False, emf=True))
_mangum = Mangum(app, lifespan="off")


@entry_point
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    try:
        return _mangum(event, context)
    finally:
        svc = app.state.service_holder.get("svc")
        try:
            if svc is not None:
                svc.metrics.flush()
        except Exception as exc:  # noqa: BLE001 - metrics are best effort; never fail the response
            logger.warning("metrics not sent: %s", exc)
