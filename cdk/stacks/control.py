"""Control stack: the planner function, run every epoch by EventBridge, every minute again for the
backlog check between epochs (which also activates a new version once its slots are served), and
on every fleet event (drain lifecycle notices and Spot interruption warnings arrive on the
fleet-events queue).

The role allows what ``control`` and the adapters it wires call (control/
service.py ``build_controller``), nothing more; docs/deploy.md lists it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_cdk import Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda_event_sources as sources

from cdk import constants as C
from cdk.lambdas import PythonFunctionSpec, python_function
from cdk.nag import acknowledge
from cdk.policies import cdk_queue_arns, list_bucket_statement, metrics_statement, queues_arn

if TYPE_CHECKING:
    from pathlib import Path

    from aws_cdk import aws_dynamodb as ddb
    from aws_cdk import aws_s3 as s3
    from aws_cdk import aws_sqs as sqs
    from constructs import Construct

__all__ = ["BACKLOG_EVENT", "ControlStack", "ControlStackProps"]

# The event of the backlog-check rule (control/service.py BACKLOG_CHECK routes it).
BACKLOG_EVENT = {"source": "skinflint.backlog", "detail-type": "Backlog check"}


@dataclass(frozen=True)
class ControlStackProps:
    code_dir: Path
    config_table: ddb.ITable
    results_table: ddb.ITable  # the stranded-frame sweep (control/sweeper.py)
    bucket: s3.IBucket
    tasks_dlq: sqs.IQueue
    fleet_events: sqs.IQueue
    asg_names: dict[str, str]  # hardware class -> Auto Scaling group name
    powertools_layer_version: int
    reserved_concurrency: int | None = None  # planner function; None: unreserved (-c planner_concurrency)


class ControlStack(Stack):
    """``planner`` (function), ``schedule`` (the epoch's rule), ``backlog`` (the check's rule)."""

    def __init__(self, scope: Construct, construct_id: str, props: ControlStackProps, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.planner, role = python_function(
            self,
            PythonFunctionSpec(
                name="Planner",
                handler=C.PLANNER_HANDLER,
                function_name=C.PLANNER_FUNCTION_NAME,
                code_dir=props.code_dir,
                memory_mb=C.PLANNER_MEMORY_MB,
                timeout_s=C.PLANNER_TIMEOUT_S,
                reserved_concurrency=props.reserved_concurrency,
                description="Skinflint planner: sessions + rates + profiles -> plans, queues, fleet size",
                powertools_layer_version=props.powertools_layer_version,
                # core/settings.py DataPlaneConfig and control/epoch.py ControlConfig
                # (from_env); the fleet events arrive as the invocation's Records, not by URL
                environment={
                    "SKINFLINT_CONFIG_TABLE": props.config_table.table_name,
                    "SKINFLINT_RESULTS_TABLE": props.results_table.table_name,
                    "SKINFLINT_BUCKET": props.bucket.bucket_name,
                    "SKINFLINT_METRICS_NAMESPACE": C.METRICS_NAMESPACE,
                    "SKINFLINT_TASKS_DLQ_ARN": props.tasks_dlq.queue_arn,
                    "SKINFLINT_ASG_NAMES": json.dumps(props.asg_names, sort_keys=True),
                    "SKINFLINT_PLANNER_EPOCH_S": str(C.PLANNER_EPOCH_S),
                    "SKINFLINT_RATE_LAG_S": str(C.PLANNER_RATE_LAG_S),
                    "SKINFLINT_QUEUE_PREFIX": C.QUEUE_NAME_PREFIX,
                    "SKINFLINT_QUEUE_WORKERS": str(C.PLANNER_QUEUE_WORKERS),
                    "SKINFLINT_BATCH_OVERHEAD_S": str(C.BATCH_OVERHEAD_S),
                    # each epoch plans the whole bill, fleet + data plane requests (control/objective.py)
                    "SKINFLINT_PLAN_OBJECTIVE": "all-in",
                },
            ),
        )
        self._grant(role, props)
        acknowledge(
            self.planner,
            "AwsSolutions-L1",
            "Python 3.13: the newest runtime for which the public Powertools v3 layer and our dependency "
            "layer are built (cdk/constants.py LAMBDA_PYTHON); raise both together.",
        )
        self.schedule = events.Rule(
            self,
            "Epoch",
            description=f"Run the planner every {C.PLANNER_EPOCH_S} s",
            schedule=events.Schedule.rate(Duration.seconds(C.PLANNER_EPOCH_S)),
            targets=[
                targets.LambdaFunction(
                    self.planner, retry_attempts=0, max_event_age=Duration.seconds(C.PLANNER_EPOCH_S)
                )
            ],
        )
        # EventBridge rules run at most once a minute and do not let a rule pick its second within
        # the minute, so the check cannot be pinned half-way between epochs: it runs at its own
        # offset, and when it lands next to an epoch the 10 s guard defers its correction to the
        # next check (docs/deploy.md, "Schedules").
        self.backlog = events.Rule(
            self,
            "BacklogCheck",
            description="Between epochs: correct late task queues, activate a new version once it is served",
            schedule=events.Schedule.rate(Duration.minutes(1)),
            targets=[
                targets.LambdaFunction(
                    self.planner,
                    event=events.RuleTargetInput.from_object(BACKLOG_EVENT),
                    retry_attempts=0,
                    max_event_age=Duration.seconds(60),
                )
            ],
        )
        self.planner.add_event_source(
            sources.SqsEventSource(
                props.fleet_events,
                batch_size=C.FLEET_EVENTS_BATCH,
                max_concurrency=C.FLEET_EVENTS_CONCURRENCY,
                report_batch_item_failures=True,
            )
        )

    def _grant(self, role: iam.Role, props: ControlStackProps) -> None:
        region, account, part = self.region, self.account, self.partition
        queues = queues_arn(part, account, region)
        registry = C.frames_bucket_arn(part, account, region, f"{C.REGISTRY_PREFIX}*")
        profiles = C.frames_bucket_arn(part, account, region, f"{C.PROFILES_PREFIX}*")
        groups = [
            f"arn:{part}:autoscaling:{region}:{account}:autoScalingGroup:*:autoScalingGroupName/{name}"
            for name in sorted(props.asg_names.values())
        ]
        for statement in (
            # plan store (versions, pointer, claims, GC), app index + planning requests, control#state
            iam.PolicyStatement(
                sid="ConfigTable",
                actions=[
                    "dynamodb:GetItem",
                    "dynamodb:BatchGetItem",
                    "dynamodb:PutItem",
                    "dynamodb:UpdateItem",
                    "dynamodb:DeleteItem",
                    "dynamodb:BatchWriteItem",
                    "dynamodb:Scan",
                ],  # fmt: skip
                resources=[props.config_table.table_arn],
            ),
            # the stranded-frame sweep: the deadline index (Query), frames' task trees and outcomes
            # (BatchGetItem), a stranded task recorded dropped and the outcome claimed (PutItem)
            iam.PolicyStatement(
                sid="ResultsSweep",
                actions=["dynamodb:Query", "dynamodb:BatchWriteItem"],
                resources=[props.results_table.table_arn],
            ),
            # GC moves the messages of a superseded version's queue nothing consumes to the current
            # version's queues (control/rehome.py): receive, send, then delete; the sweep sends a push
            # app's due messages to its results queue, skinflint-<app>-results (control/sweeper.py)
            iam.PolicyStatement(
                sid="StrandedMessages",
                actions=["sqs:ReceiveMessage", "sqs:SendMessage", "sqs:DeleteMessage"],
                resources=[queues],
            ),
            # registered app specs; the catalog override and shared profiles (profile store)
            iam.PolicyStatement(
                sid="SpecsAndProfiles", actions=["s3:GetObject"], resources=[registry, profiles]
            ),
            list_bucket_statement(part, account, region),
            # fresh per-machine queues (created with tags), depth before GC, GC
            iam.PolicyStatement(
                sid="TaskQueues",
                actions=["sqs:CreateQueue", "sqs:TagQueue", "sqs:GetQueueAttributes", "sqs:DeleteQueue"],
                resources=[queues],
            ),
            iam.PolicyStatement(
                sid="NotTheStackQueues",
                effect=iam.Effect.DENY,
                actions=["sqs:CreateQueue", "sqs:TagQueue", "sqs:DeleteQueue"],
                resources=cdk_queue_arns(part, account, region),
            ),
            iam.PolicyStatement(
                sid="ReadOnlyWithoutResourceScope",
                actions=[
                    "autoscaling:DescribeAutoScalingGroups",
                    "autoscaling:DescribeScalingActivities",
                    "cloudwatch:GetMetricData",
                    "sqs:ListQueues",
                ],  # fmt: skip
                resources=["*"],
            ),
            metrics_statement(),
        ):
            role.add_to_policy(statement)
        if groups:
            role.add_to_policy(
                iam.PolicyStatement(
                    sid="FleetSize", actions=["autoscaling:SetDesiredCapacity"], resources=groups
                )
            )
        acknowledge(
            role,
            f"AwsSolutions-IAM5[Resource::{queues}]",
            "The planner creates one task queue per planned machine at run time; all are named "
            f"{C.QUEUE_NAME_PREFIX}<app>-..., the narrowest scope that exists before they do.",
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "DescribeAutoScalingGroups, DescribeScalingActivities, GetMetricData, ListQueues and "
            "PutMetricData have no resource-level permissions (read-only, and PutMetricData is pinned to "
            "the Skinflint namespace by condition).",
        )
        acknowledge(
            role,
            f"AwsSolutions-IAM5[Resource::{registry}]",
            "Registered app specs are stored as registry/apps/<app>/r<revision>.json (and the plan the "
            "registration solved as r<revision>.seed.json); the planner reads every registered app's current "
            "revision, and the seed of an app it has not planned yet.",
        )
        acknowledge(
            role,
            f"AwsSolutions-IAM5[Resource::{profiles}]",
            "The hardware catalog override and the shared profiles live under profiles/ (the profile "
            "store); model names are not known at deploy time.",
        )
        for name in sorted(props.asg_names.values()):
            acknowledge(
                role,
                f"AwsSolutions-IAM5[Resource::arn:{part}:autoscaling:{region}:{account}:"
                f"autoScalingGroup:*:autoScalingGroupName/{name}]",
                "A group ARN embeds a generated id; the name part pins the statement to one worker group.",
            )
