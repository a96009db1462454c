"""Errors of the serving data plane. One base class; adapters wrap botocore's errors (a service's
``ClientError`` and a network-level ``BotoCoreError``: ``core.adapters._aws.AWS_ERRORS``) into these."""

from __future__ import annotations

__all__ = [
    "BlobError",
    "ConfigError",
    "DataPlaneError",
    "MetricsError",
    "QueueError",
    "ResultStoreError",
]


class DataPlaneError(Exception):
    """Base class of every error the front API, the adapters and the workers raise."""


class ConfigError(DataPlaneError):
    """The deployment record (plan, queues, assignments, API keys) is missing or invalid."""

    def __init__(self, message: str, key: str = ""):
        super().__init__(message)
        self.key = key


class QueueError(DataPlaneError):
    """An SQS call failed. ``queue_url`` names the queue."""

    def __init__(self, message: str, queue_url: str = ""):
        super().__init__(message)
        self.queue_url = queue_url


class ResultStoreError(DataPlaneError):
    """A DynamoDB call on the results table failed."""


class BlobError(DataPlaneError):
    """An S3 call failed. ``key`` names the object."""

    def __init__(self, message: str, key: str = ""):
        super().__init__(message)
        self.key = key


class MetricsError(DataPlaneError):
    """PutMetricData failed (metrics are best effort: callers log this, never fail a request)."""
