"""Settings of the data plane, read from the environment once (handlers and workers pass them on)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DataPlaneConfig", "make_client"]

# SQS's message size limit is 256 KiB; frames whose message would exceed this go to S3.
SQS_INLINE_LIMIT_BYTES = 200 * 1024  # bytes of base64 payload kept inline (envelope fits in the rest)
MAX_BODY_BYTES = 6 * 1024 * 1024  # bytes: Lambda's synchronous payload limit


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
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> DataPlaneConfig:
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
        )

    def to_env(self) -> dict[str, str]:
        env = {
            "AWS_DEFAULT_REGION": self.region,
            "SKINFLINT_CONFIG_TABLE": self.config_table,
            "SKINFLINT_RESULTS_TABLE": self.results_table,
            "SKINFLINT_BUCKET": self.bucket,
            "SKINFLINT_METRICS_NAMESPACE": self.metrics_namespace,
            "SKINFLINT_INLINE_LIMIT_BYTES": str(self.inline_limit_bytes),
            "SKINFLINT_MAX_BODY_BYTES": str(self.max_body_bytes),
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
