"""Builds a :class:`FrontService` from the environment (Lambda, uvicorn) with real boto3 clients."""

from __future__ import annotations

import math
import os

from core.adapters.blobs import BlobStore
from core.adapters.config_store import ConfigStore
from core.adapters.plan_store import PlanStore
from core.adapters.queues import TaskQueues
from core.adapters.results import ResultStore
from core.adapters.slots import SlotCounter
from core.clients import make_client, make_metrics
from core.errors import ConfigError
from core.settings import DataPlaneConfig
from front.admission import Admission, AdmissionConfig
from front.images import LimitsConfig
from front.service import FrontService

__all__ = ["EMF_USAGE_EVERY_S", "service_from_config"]

#: s between the usage meter's counts in the EMF front's lines (EmfMetrics.collect_every_s): flushed
#: after every request, they would add a line per operation counted to every request's flush
EMF_USAGE_EVERY_S = 10.0


def service_from_config(
    config: DataPlaneConfig | None = None, background_metrics: bool = True, emf: bool | None = None
) -> FrontService:
    """``emf`` (default: ``SKINFLINT_METRICS_SINK`` is ``emf``): the metrics are written as Embedded
    Metric Format lines (``make_metrics``: no PutMetricData call) to stdout, the Lambda front's log,
    or appended to ``SKINFLINT_EMF_FILE`` (the local front, whose stack emulates CloudWatch's
    extraction); the caller flushes them after each request, the usage counts at most every
    :data:`EMF_USAGE_EVERY_S`. Otherwise they go to PutMetricData, every
    ``SKINFLINT_METRICS_FLUSH_S`` from a background thread when ``background_metrics``."""
    if config is None:
        try:
            config = DataPlaneConfig.from_env()
        except ValueError as exc:  # a bad setting: 503 with this one line in the log, no traceback
            raise ConfigError(str(exc), key="environment") from None
    cfg = config
    try:
        image_limits = LimitsConfig.from_env()
        waiters = _positive_int("SKINFLINT_FRONT_MAX_WAITERS", 32)
        read_rate = _number("SKINFLINT_FRONT_KEY_READ_RATE", 0.0)
        read_burst = _number("SKINFLINT_FRONT_KEY_READ_BURST", max(1.0, 2 * read_rate))
    except ValueError as exc:  # a bad setting: 503 with this one line in the log
        raise ConfigError(str(exc), key="SKINFLINT_FRONT_*") from None
    ddb = make_client("dynamodb", cfg, "front")
    emf = cfg.metrics_sink == "emf" if emf is None else emf
    metrics = make_metrics(cfg, "front", emf=emf, collect_every_s=EMF_USAGE_EVERY_S if emf else 0.0)
    if background_metrics and not emf:
        metrics.start()
    return FrontService(
        config=cfg,
        store=ConfigStore(ddb, cfg.config_table),
        results=ResultStore(ddb, cfg.results_table, cfg.results_retention_s),
        queues=TaskQueues(make_client("sqs", cfg, "front")),
        blobs=BlobStore(make_client("s3", cfg, "front"), cfg.bucket),
        metrics=metrics,
        admission=_admission(ddb, cfg.results_table),
        plans=PlanStore(ddb, cfg.config_table),
        image_limits=image_limits,
        max_waiters_per_key=waiters,
        read_rate_per_s=read_rate,
        read_burst=max(1.0, read_burst),
    )


def _number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    value = float(raw) if raw else default
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a number >= 0, not {raw!r}")
    return value


def _positive_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    value = int(raw) if raw else default
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, not {raw!r}")
    return value


def _admission(ddb: object, results_table: str) -> Admission:
    """Admission from the environment, with the shared slot counter when
    ``SKINFLINT_ADMISSION_SHARED`` is on (the deployed front: several Lambda instances)."""
    config = AdmissionConfig.from_env()
    return Admission(config, SlotCounter(ddb, results_table) if config.shared_slots else None)
