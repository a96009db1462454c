"""The components' AWS clients and metrics, made from the data plane's settings: a boto3 client with
the project's retry policy and, per component, its usage meter (core/adapters/usage.py); the metrics
sink the settings name (PutMetricData or Embedded Metric Format lines)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.adapters.metrics import CloudWatchMetrics, EmfMetrics, Metrics, emf_file_writer
from core.adapters.usage import LOGS_INGESTED, attach, meter, report_to

if TYPE_CHECKING:
    from core.settings import DataPlaneConfig

__all__ = ["make_client", "make_metrics"]


def make_metrics(
    config: DataPlaneConfig, component: str, emf: bool | None = None, collect_every_s: float = 0.0
) -> Metrics:
    """``component``'s metrics, its usage counts included (``report_to``): Embedded Metric Format
    lines when ``emf`` (default: ``config.metrics_sink == "emf"``), written to ``config.emf_file``
    or stdout, their bytes counted as CloudWatch Logs ingestion; else PutMetricData through a
    client made for ``component``. The caller flushes (or ``start()`` s a flush thread)."""
    if not (config.metrics_sink == "emf" if emf is None else emf):
        client = make_client("cloudwatch", config, component)
        return report_to(CloudWatchMetrics(client, config.metrics_namespace), component)
    counted = meter(component) if config.usage_metering else None
    return report_to(
        EmfMetrics(
            config.metrics_namespace,
            write=emf_file_writer(config.emf_file) if config.emf_file else None,
            on_written=None
            if counted is None
            else lambda size: counted.add_units(LOGS_INGESTED, float(size)),
            collect_every_s=collect_every_s,
        ),
        component,
    )


def make_client(service: str, config: DataPlaneConfig, component: str | None = None) -> Any:
    """A boto3 client for ``service``. With ``component`` (``front``, ``worker``, ``instance``,
    ``control``) its requests are counted in that component's usage meter (core/adapters/usage.py)
    unless ``config.usage_metering`` is off."""
    # boto3 loads on the first client, not at import: the front Lambda's cold start imports this module
    import boto3
    from botocore.config import Config  # cold start: as boto3

    client = boto3.client(
        service,
        region_name=config.region,
        endpoint_url=config.endpoint_url,
        config=Config(retries={"max_attempts": 3, "mode": "standard"}, max_pool_connections=32),
    )
    if component is not None and config.usage_metering:
        attach(client, component)
    return client
