"""Create the data plane's base resources (the same names CDK would use): the config and results
tables and the frames bucket. The queues are the control loop's: it creates each plan version's
queues when it publishes the version (``control.queues``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.adapters._aws import AWS_ERRORS
from core.adapters.results import EXPIRES_AT
from core.errors import ConfigError

if TYPE_CHECKING:
    from core.settings import DataPlaneConfig

__all__ = ["create_base"]


def create_base(ddb: Any, s3: Any, cfg: DataPlaneConfig) -> None:
    """Config and results tables (on demand; the results' TTL attribute on) and the frames bucket."""
    try:
        ddb.create_table(
            TableName=cfg.config_table,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        ddb.create_table(
            TableName=cfg.results_table,
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        # as the CDK stack's table (moto records the setting; it never deletes expired items)
        ddb.update_time_to_live(
            TableName=cfg.results_table,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": EXPIRES_AT},
        )
        s3.create_bucket(Bucket=cfg.bucket)
    except AWS_ERRORS as exc:
        raise ConfigError(f"cannot create the base resources: {exc}") from exc
