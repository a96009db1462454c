"""IAM statements more than one role needs, written once. ARNs are literal (names from
``cdk/constants.py``), so no stack imports another's outputs for a policy."""

from __future__ import annotations

from aws_cdk import aws_iam as iam

from cdk import constants as C

__all__ = ["cdk_queue_arns", "list_bucket_statement", "metrics_statement", "queues_arn"]


def queues_arn(partition: str, account: str, region: str) -> str:
    """Every queue named with the task queues' prefix (created by the planner at run time)."""
    return f"arn:{partition}:sqs:{region}:{account}:{C.QUEUE_NAME_PREFIX}*"


def cdk_queue_arns(partition: str, account: str, region: str) -> list[str]:
    """The stack's own queues, which share the task queues' prefix: roles granted the prefix are
    denied these (a worker must never receive fleet events or drain a dead-letter queue)."""
    return [f"arn:{partition}:sqs:{region}:{account}:{name}" for name in C.CDK_QUEUE_NAMES]


def metrics_statement() -> iam.PolicyStatement:
    """PutMetricData has no resource-level permissions; the namespace condition pins it."""
    return iam.PolicyStatement(
        sid="Metrics",
        actions=["cloudwatch:PutMetricData"],
        resources=["*"],
        conditions={"StringEquals": {"cloudwatch:namespace": C.METRICS_NAMESPACE}},
    )


def list_bucket_statement(partition: str, account: str, region: str) -> iam.PolicyStatement:
    """``s3:ListBucket`` on the frames bucket, for the profile store (``profiles/``).

    The code lists ``profiles/data/`` (the models with a stored profile) and reads
    ``profiles/hardware.json``, which may be absent: S3 answers a GetObject of a missing key with 404
    only when the caller may list the bucket, else 403, and the store reads 403 as a failure, not as
    "absent". That implicit check carries no ``s3:prefix``, hence ``StringLikeIfExists``: a listing
    that names a prefix must name one under ``profiles/``; one without a prefix is not restricted
    (the code always passes one). Object keys elsewhere are request ids and app names."""
    return iam.PolicyStatement(
        sid="ProfileStoreListing",
        actions=["s3:ListBucket"],
        resources=[C.frames_bucket_arn(partition, account, region)],
        conditions={"StringLikeIfExists": {"s3:prefix": [f"{C.PROFILES_PREFIX}*"]}},
    )
