"""Settings of the data plane, read from the environment once (handlers and workers pass them on)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "DEFAULT_DELETE_LINGER_S",
    "DEFAULT_RESULTS_RETENTION_DAYS",
    "DELETE_BATCH",
    "DataPlaneConfig",
    "delete_linger_from_env",
    "make_client",
    "results_retention_from_env",
    "undeleted_bound",
]

# SQS's message size limit is 256 KiB; frames whose message would exceed this go to S3.
SQS_INLINE_LIMIT_BYTES = 200 * 1024  # bytes of base64 payload kept inline (envelope fits in the rest)
MAX_BODY_BYTES = 6 * 1024 * 1024  # bytes: Lambda's synchronous payload limit

#: s a processed message's delete may wait to share a DeleteMessageBatch (gpu_fleet.worker; the
#: control loop's backlog check allows for the messages it keeps in flight meanwhile). At batch size 1
#: (the demo's 4 frames/s) every batch used to send its own delete: SQS bills a batch request as one.
DEFAULT_DELETE_LINGER_S = 1.0
DELETE_BATCH = 10  # SQS's DeleteMessageBatch limit


def delete_linger_from_env(env: Mapping[str, str] | None = None) -> float:
    """``SKINFLINT_DELETE_LINGER_S`` (0-10 s; 0 deletes at once), else :data:`DEFAULT_DELETE_LINGER_S`.
    Raises ValueError with the setting's name on anything else."""
    raw = (os.environ if env is None else env).get("SKINFLINT_DELETE_LINGER_S")
    if raw is None or not raw.strip():
        return DEFAULT_DELETE_LINGER_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"SKINFLINT_DELETE_LINGER_S must be a number of seconds, got {raw!r}") from None
    if not value >= 0 or value > 10:
        raise ValueError(f"SKINFLINT_DELETE_LINGER_S must be within [0, 10] s, got {raw!r}")
    return value


#: days a request's items stay in the results table (its frame, task and outcome items carry an
#: ``expires_at`` of write time + this; DynamoDB's TTL deletes them some time after). The CDK stacks use
#: the same figure for the S3 lifecycle of large task outputs, which the task items point at.
DEFAULT_RESULTS_RETENTION_DAYS = 7.0
_MAX_RESULTS_RETENTION_DAYS = 365.0


def results_retention_from_env(env: Mapping[str, str] | None = None) -> float:
    """``SKINFLINT_RESULTS_RETENTION_DAYS`` (a number of days in (0, 365]), else
    :data:`DEFAULT_RESULTS_RETENTION_DAYS`. Raises ValueError with the setting's name on anything else."""
    raw = (os.environ if env is None else env).get("SKINFLINT_RESULTS_RETENTION_DAYS")
    if raw is None or not raw.strip():
        return DEFAULT_RESULTS_RETENTION_DAYS
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"SKINFLINT_RESULTS_RETENTION_DAYS must be a number of days, got {raw!r}") from None
    if not 0 < value <= _MAX_RESULTS_RETENTION_DAYS:
        raise ValueError(
            f"SKINFLINT_RESULTS_RETENTION_DAYS must be within (0, {_MAX_RESULTS_RETENTION_DAYS:g}] days, "
            f"got {raw!r}"
        )
    return value


def undeleted_bound(rate: float, linger_s: float) -> float:
    """How many processed messages a machine's queue may still hold in flight because their delete
    lingers: those processed within the last ``1.25 x linger_s`` (a worker's flusher looks every
    quarter linger) at the machine's rate, and never a full DeleteMessageBatch (ten go out at once)."""
    if linger_s <= 0:
        return 0.0
    return min(DELETE_BATCH - 1.0, rate * 1.25 * linger_s)


@dataclass(frozen=True)
class DataPlaneConfig:
    """Names of the resources and the endpoint (``endpoint_url`` is moto's server locally)."""

    region: str = "us-east-1"
    endpoint_url: str | None = None
    config_table: str = "skinflint-config"
    results_table: str = "skinflint-results"
    bucket: str = "skinflint-frames"
    metrics_namespace: str = "Skinflint"
    inline_limit_bytes: int = SQS_INLINE_LIMIT_BYTES
    max_body_bytes: int = MAX_BODY_BYTES
    output_inline_limit_bytes: int = 64 * 1024  # task outputs larger than this go to S3
    results_retention_days: float = DEFAULT_RESULTS_RETENTION_DAYS  # then the results' items expire
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> DataPlaneConfig:
        """The settings in ``env`` (default: the process environment). Raises ValueError naming the
        setting when ``SKINFLINT_RESULTS_RETENTION_DAYS`` is not a valid number of days."""
        e = os.environ if env is None else env
        d = cls()
        return cls(
            region=e.get("AWS_DEFAULT_REGION", e.get("AWS_REGION", d.region)),
            endpoint_url=e.get("SKINFLINT_ENDPOINT_URL") or None,
            config_table=e.get("SKINFLINT_CONFIG_TABLE", d.config_table),
            results_table=e.get("SKINFLINT_RESULTS_TABLE", d.results_table),
            bucket=e.get("SKINFLINT_BUCKET", d.bucket),
            metrics_namespace=e.get("SKINFLINT_METRICS_NAMESPACE", d.metrics_namespace),
            inline_limit_bytes=int(e.get("SKINFLINT_INLINE_LIMIT_BYTES", d.inline_limit_bytes)),
            max_body_bytes=int(e.get("SKINFLINT_MAX_BODY_BYTES", d.max_body_bytes)),
            results_retention_days=results_retention_from_env(e),
        )

    @property
    def results_retention_s(self) -> float:
        return self.results_retention_days * 86_400.0

    def to_env(self) -> dict[str, str]:
        env = {
            "AWS_DEFAULT_REGION": self.region,
            "SKINFLINT_CONFIG_TABLE": self.config_table,
            "SKINFLINT_RESULTS_TABLE": self.results_table,
            "SKINFLINT_BUCKET": self.bucket,
            "SKINFLINT_METRICS_NAMESPACE": self.metrics_namespace,
            "SKINFLINT_INLINE_LIMIT_BYTES": str(self.inline_limit_bytes),
            "SKINFLINT_MAX_BODY_BYTES": str(self.max_body_bytes),
            "SKINFLINT_RESULTS_RETENTION_DAYS": repr(float(self.results_retention_days)),
        }
        if self.endpoint_url:
            env["SKINFLINT_ENDPOINT_URL"] = self.endpoint_url
        return env


def make_client(service: str, config: DataPlaneConfig) -> Any:
    """A boto3 client for ``service`` (imported lazily: Lambda cold start)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        service,
        region_name=config.region,
        endpoint_url=config.endpoint_url,
        config=Config(retries={"max_attempts": 3, "mode": "standard"}, max_pool_connections=32),
    )
