"""Logs and the cold-start metric of the Lambda entry points, through Powertools (its layer ships with
every function; ``POWERTOOLS_SERVICE_NAME``, ``POWERTOOLS_METRICS_NAMESPACE`` and
``POWERTOOLS_LOG_LEVEL`` come from cdk/lambdas.py).

:data:`logger` is a Powertools Logger named after the service, ``skinflint``: the parent of every
logger of the project (``skinflint.front``, ``skinflint.control``, ...), so each of their records is
written as one JSON line with the invocation's Lambda context (request id, function, cold start) and
the keys the front appends (``request_id``: the frame's, core/logs.py). :func:`entry_point` wraps a
handler with it and publishes Powertools' ``ColdStart`` metric on a function's first invocation.

The data plane's own metrics stay with ``core.adapters.metrics.EmfMetrics``: Powertools Metrics
writes every value of a series on the line (no aggregation per time bucket, no statistic set), gives
every metric of a flush the same dimensions and timestamp, writes to stdout only, and cannot report
the bytes it wrote (the usage meter counts them as CloudWatch Logs ingestion)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics

from core.logs import LOGGER_NAME, keep_keys_with

__all__ = ["Handler", "entry_point", "logger", "metrics"]

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]

logger = Logger(service=LOGGER_NAME)
metrics = Metrics()
keep_keys_with(logger.append_keys)

_cold = {"start": True}


def entry_point(handler: Handler) -> Handler:
    """``handler`` with the invocation's keys reset and its Lambda context on every log line, and the
    ``ColdStart`` metric on the first invocation. Without a context (a test, a local call) only the
    keys are reset."""
    logged = logger.inject_lambda_context(handler, clear_state=True)

    @functools.wraps(handler)
    def run(event: dict[str, Any], context: Any) -> dict[str, Any]:
        if context is None:
            logger.clear_state()
            return handler(event, context)
        if _cold["start"]:
            _cold["start"] = False
            metrics.provider.add_cold_start_metric(context)
        return logged(event, context)

    return run
