"""Stateful stack: tables, the frames bucket, the CDK-owned queues (and the rule that forwards EC2
Spot interruption warnings to the fleet-events queue). Termination protection on; every table,
bucket and queue is retained when the stack is deleted."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_cdk import CfnOutput, Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs

from cdk import constants as C
from cdk.nag import acknowledge

if TYPE_CHECKING:
    from constructs import Construct

__all__ = ["StatefulStack"]


class StatefulStack(Stack):
    """``config_table``, ``results_table``, ``bucket``, ``tasks_dlq``, ``fleet_events`` (+ its DLQ),
    ``spot_notices`` (rule)."""

    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, termination_protection=True, **kwargs)
        self.config_table = ddb.Table(
            self,
            "ConfigTable",
            table_name=C.CONFIG_TABLE_NAME,
            partition_key=ddb.Attribute(name="pk", type=ddb.AttributeType.STRING),
            billing_mode=ddb.BillingMode.PAY_PER_REQUEST,
            encryption=ddb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=ddb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.results_table = ddb.Table(
            self,
            "ResultsTable",
            table_name=C.RESULTS_TABLE_NAME,
            partition_key=ddb.Attribute(name="pk", type=ddb.AttributeType.STRING),
            sort_key=ddb.Attribute(name="sk", type=ddb.AttributeType.STRING),
            billing_mode=ddb.BillingMode.PAY_PER_REQUEST,
            encryption=ddb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=ddb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=C.RESULTS_TTL_ATTRIBUTE,
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
        )

        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,  # log delivery cannot write to SSE-KMS buckets
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(C.ACCESS_LOGS_EXPIRE_DAYS))],
            removal_policy=RemovalPolicy.RETAIN,
        )
        acknowledge(
            self.access_logs,
            "AwsSolutions-S1",
            "This is the server-access-log bucket of the frames bucket; logging it into itself would loop.",
        )
        self.bucket = s3.Bucket(
            self,
            "Frames",
            bucket_name=C.frames_bucket_name(self.account, self.region),
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="frames/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="frames", prefix=C.FRAMES_PREFIX, expiration=Duration.days(C.FRAMES_EXPIRE_DAYS)
                ),
                s3.LifecycleRule(
                    id="outputs", prefix=C.OUTPUTS_PREFIX, expiration=Duration.days(C.OUTPUTS_EXPIRE_DAYS)
                ),
                s3.LifecycleRule(
                    id="multipart",
                    abort_incomplete_multipart_upload_after=Duration.days(C.ABORT_MULTIPART_DAYS),
                ),
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )

        self.tasks_dlq = self._queue(
            "TasksDlq", C.TASKS_DLQ_NAME, retention=Duration.days(C.QUEUE_RETENTION_DAYS), dlq=None
        )
        self.fleet_events_dlq = self._queue(
            "FleetEventsDlq",
            C.FLEET_EVENTS_DLQ_NAME,
            retention=Duration.days(C.QUEUE_RETENTION_DAYS),
            dlq=None,
        )
        self.fleet_events = self._queue(
            "FleetEvents",
            C.FLEET_EVENTS_QUEUE_NAME,
            retention=Duration.hours(C.FLEET_EVENTS_RETENTION_HOURS),
            dlq=self.fleet_events_dlq,
        )
        # The planner releases an interrupted instance's slot claims at once (control/
        # service.py reads detail.instance-id); the instance drains itself from IMDS. The rule lives
        # here, beside the queue whose policy it extends (in the fleet stack it would make a cycle).
        # It matches every Spot instance of the region; the planner ignores ids it does not know.
        self.spot_notices = events.Rule(
            self,
            "SpotInterruptions",
            description="EC2 Spot interruption warnings -> the planner (fleet-events queue)",
            event_pattern=events.EventPattern(
                source=["aws.ec2"], detail_type=["EC2 Spot Instance Interruption Warning"]
            ),
            targets=[targets.SqsQueue(self.fleet_events)],
        )
        # what the CLI needs (skinflint apps|status|report read SKINFLINT_CONFIG_TABLE, _BUCKET, ...)
        CfnOutput(self, "ConfigTableName", value=self.config_table.table_name)
        CfnOutput(self, "ResultsTableName", value=self.results_table.table_name)
        CfnOutput(self, "BucketName", value=self.bucket.bucket_name)

    def _queue(self, cid: str, name: str, retention: Duration, dlq: sqs.IQueue | None) -> sqs.Queue:
        queue = sqs.Queue(
            self,
            cid,
            queue_name=name,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=retention,
            visibility_timeout=Duration.seconds(C.FLEET_EVENTS_VISIBILITY_S),
            dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=C.MAX_RECEIVE_COUNT)
            if dlq
            else None,
            removal_policy=RemovalPolicy.RETAIN,
        )
        if dlq is None:
            acknowledge(
                queue,
                "AwsSolutions-SQS3",
                "This queue is itself a dead-letter queue; a DLQ of a DLQ adds nothing.",
            )
        return queue
