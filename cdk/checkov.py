"""checkov on the synthesized templates (``make checkov``, part of ``make lint``): every finding it
reports for this app is acknowledged here, on the resources it concerns, with a written reason, as
CloudFormation metadata checkov reads (``Metadata: {checkov: {skip: [{id, comment}]}}``).

checkov 3.3.30 on the default synthesis (HTTP API front) found 24 failures of 9 checks (284 passed);
on the REST API variant (``-c front_api=rest``) 26 of 11 (297 passed), the REST stage's cache and
X-Ray checks (CKV_AWS_120, CKV_AWS_73) adding two. ``make checkov`` scans both. None is fixed by a
setting here because each trades cost or a new account's defaults for nothing the design needs.
The reasons say why. A new finding fails ``make lint``: fix it or add it here.
checkov runs in a venv of its own (Makefile): it pins boto3 1.35, botocore 1.35, packaging 23.2 and
networkx 2.6, below what the project uses, so it is not a dev dependency.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jsii
from aws_cdk import Aspects, CfnResource, IAspect

if TYPE_CHECKING:
    from constructs import IConstruct

__all__ = ["SKIPS", "CheckovSkips", "skip_checkov_findings"]

_LAMBDA = "AWS::Lambda::Function"

#: CloudFormation resource type -> (check id, why it does not apply), for every resource of the type
SKIPS: dict[str, tuple[tuple[str, str], ...]] = {
    _LAMBDA: (
        (
            "CKV_AWS_116",
            "No asynchronous invocation loses work: the front is invoked synchronously by API Gateway "
            "(the client gets the error), the planner on a schedule whose next run redoes the epoch and "
            "by SQS (fleet events, which have their own DLQ); CDK's custom resource by CloudFormation",
        ),
        (
            "CKV_AWS_117",
            "The functions call only AWS APIs (DynamoDB, SQS, S3, CloudWatch, Auto Scaling, Lambda) "
            "with IAM-scoped roles; a VPC would need NAT or an endpoint per service and add cold-start "
            "latency to the front, with no private resource to reach",
        ),
    ),
    "AWS::DynamoDB::Table": (
        (
            "CKV_AWS_119",
            "Encrypted at rest with the AWS managed key (TableEncryption.AWS_MANAGED); a customer "
            "managed key adds a monthly key charge and a KMS request per uncached read and write at "
            "hundreds of thousands of units per second, with IAM as the access boundary either way",
        ),
    ),
    "AWS::Logs::LogGroup": (
        (
            "CKV_AWS_158",
            "CloudWatch Logs encrypts every log group at rest; these hold request metadata, metrics "
            "(EMF) and flow logs, no frame data, so a customer managed key buys no boundary IAM lacks",
        ),
    ),
    "AWS::SQS::Queue": (
        (
            "CKV_AWS_27",
            "Encrypted at rest with SSE-SQS (SqsManagedSseEnabled, QueueEncryption.SQS_MANAGED) and "
            "TLS enforced by the queue policy; the check recognises only a KMS key",
        ),
    ),
    "AWS::ApiGateway::Stage": (
        (
            "CKV_AWS_120",
            "Every request is a POST of a new frame or a read of a result that changes until done: "
            "a cache would serve stale results and is billed per hour",
        ),
        (
            "CKV_AWS_73",
            "X-Ray bills each trace (one per frame at the planned rates); the front measures its own "
            "latency (AdmissionMs, DispatchMs) and API Gateway writes access logs",
        ),
    ),
}

#: (resource type, logical-id prefix) -> (check id, why), for some resources of a type only
SKIPS_BY_ID: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {
    ("AWS::S3::Bucket", "AccessLogs"): (
        (
            "CKV_AWS_18",
            "This is the access-log bucket: logging it would log its own log deliveries",
        ),
        (
            "CKV_AWS_21",
            "Log objects are written once under unique keys and expire (90 days); versions would only "
            "keep expired logs",
        ),
    ),
    ("AWS::S3::Bucket", "Frames"): (
        (
            "CKV_AWS_21",
            "Frames and large outputs are written once under unique keys and expire in days; "
            "versioning would keep every expired frame (the registry's specs are checksummed in DynamoDB)",
        ),
    ),
}

_ENVIRONMENT = (
    "CKV_AWS_173",
    "The environment holds resource names and settings, no secret (API keys are hashed in "
    "DynamoDB); Lambda encrypts it at rest with the AWS managed key",
)
_UNRESERVED = (
    "CKV_AWS_115",
    "Reserved concurrency comes from the plan (-c front_concurrency / planner_concurrency, "
    "cdk/limits.py); unreserved by default so that a new account (concurrency limit 10) can deploy",
)


@jsii.implements(IAspect)
class CheckovSkips:
    """Adds the checkov skips of :data:`SKIPS`, :data:`SKIPS_BY_ID` and, on a function, CKV_AWS_115
    (without reserved concurrency) and CKV_AWS_173 (with an environment), to every CloudFormation
    resource below the scope."""

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, CfnResource):
            return
        kind = node.cfn_resource_type
        logical = node.node.id
        skips = list(SKIPS.get(kind, ()))
        for (rtype, prefix), more in SKIPS_BY_ID.items():
            if kind == rtype and _owner_id(node).startswith(prefix):
                skips += more
        if kind == _LAMBDA and getattr(node, "reserved_concurrent_executions", None) is None:
            skips.append(_UNRESERVED)
        if kind == _LAMBDA and getattr(node, "environment", None) is not None:
            skips.append(_ENVIRONMENT)
        if not skips:
            return
        for check, why in skips:
            if len(why) < 40:
                raise ValueError(f"checkov skip {check} on {logical} needs a written reason")
        meta: dict[str, Any] = {"skip": [{"id": check, "comment": why} for check, why in skips]}
        node.add_metadata("checkov", meta)


def _owner_id(node: CfnResource) -> str:
    """The id of the L2 construct that owns ``node`` (``Frames`` for ``Frames/Resource``)."""
    scope = node.node.scope
    return scope.node.id if node.node.id == "Resource" and scope is not None else node.node.id


def skip_checkov_findings(scope: IConstruct) -> None:
    """Attach :class:`CheckovSkips` to ``scope`` (the app)."""
    Aspects.of(scope).add(CheckovSkips())
