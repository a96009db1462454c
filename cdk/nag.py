"""cdk-nag 3.x: the AwsSolutions pack runs as a CDK policy-validation plugin (``Validations``), and
every acknowledgement names one finding and carries a written reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Acknowledgment, Validations
from cdk_nag import AwsSolutionsChecks

if TYPE_CHECKING:
    from constructs import IConstruct

__all__ = ["acknowledge", "enable_aws_solutions_checks"]


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge finding ``rule`` (e.g. ``AwsSolutions-IAM5[Resource::*]``) on ``scope`` and below."""
    if len(reason.strip()) < 20:
        raise ValueError(f"acknowledging {rule} needs a written reason, got {reason!r}")
    Validations.of(scope).acknowledge(Acknowledgment(id=rule, reason=reason))


def enable_aws_solutions_checks(scope: IConstruct) -> None:
    Validations.of(scope).add_plugins(
        AwsSolutionsChecks(scope, verbose=True, write_suppressions_to_cloud_formation=True)
    )
