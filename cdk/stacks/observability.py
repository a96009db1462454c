"""Observability stack: one dashboard (cost per hour by hardware, SLO attainment, queue age, batch
fill, drops, front health) and alarms (DLQ depth, queue age, SLO attainment, front errors) that
notify an encrypted SNS topic."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_cdk import CfnOutput, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subs

from cdk import constants as C

if TYPE_CHECKING:
    from aws_cdk import aws_apigateway as apigw
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_sqs as sqs
    from constructs import Construct

    from cdk.config import HardwareClass

__all__ = ["ObservabilityStack", "ObservabilityStackProps"]

_MINUTE = Duration.seconds(C.ALARM_PERIOD_S)


@dataclass(frozen=True)
class ObservabilityStackProps:
    hardware: tuple[HardwareClass, ...]
    dlqs: tuple[sqs.IQueue, ...]
    fleet_events: sqs.IQueue
    front: lambda_.IFunction
    planner: lambda_.IFunction
    api: apigw.RestApi
    alarm_email: str | None = None


def _search(expr: str, stat: str, label: str) -> cw.MathExpression:
    return cw.MathExpression(
        expression=f"SEARCH('{expr}', '{stat}', {C.ALARM_PERIOD_S})", label=label, period=_MINUTE
    )


class ObservabilityStack(Stack):
    """``dashboard``, ``alarms`` (name -> alarm), ``topic``."""

    def __init__(
        self, scope: Construct, construct_id: str, props: ObservabilityStackProps, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.props = props
        key = kms.Key(
            self,
            "AlarmKey",
            description="Skinflint alarm topic",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.DESTROY,
            pending_window=Duration.days(7),
        )
        key.grant(iam.ServicePrincipal("cloudwatch.amazonaws.com"), "kms:Decrypt", "kms:GenerateDataKey*")
        self.topic = sns.Topic(
            self, "Alarms", display_name="Skinflint alarms", master_key=key, enforce_ssl=True
        )
        if props.alarm_email:
            self.topic.add_subscription(subs.EmailSubscription(props.alarm_email))
        self.alarms: dict[str, cw.Alarm] = {}
        self._alarms()
        self.dashboard = self._dashboard()
        CfnOutput(
            self,
            "DashboardUrl",
            value=f"https://{self.region}.console.aws.amazon.com/cloudwatch/home?region={self.region}"
            f"#dashboards:name={C.DASHBOARD_NAME}",
        )
        CfnOutput(self, "AlarmTopicArn", value=self.topic.topic_arn)

    # -- metrics ---------------------------------------------------------------------------------
    def cost_per_hour(self) -> list[cw.IMetric]:
        """USD/h per hardware class: in-service instances x catalog price, plus the total."""
        per_class: dict[str, cw.IMetric] = {}
        lines: list[cw.IMetric] = []
        for i, hw in enumerate(self.props.hardware):
            instances = cw.Metric(
                namespace="AWS/AutoScaling",
                metric_name="GroupInServiceInstances",
                dimensions_map={"AutoScalingGroupName": hw.asg_name},
                statistic="Average",
                period=Duration.minutes(5),
            )
            per_class[f"n{i}"] = instances
            lines.append(
                cw.MathExpression(
                    expression=f"n{i} * {hw.price_per_hour}",
                    using_metrics={f"n{i}": instances},
                    label=f"{hw.name} ({hw.instance_type}) USD/h",
                    period=Duration.minutes(5),
                )
            )
        if per_class:
            total = " + ".join(f"n{i} * {hw.price_per_hour}" for i, hw in enumerate(self.props.hardware))
            lines.append(
                cw.MathExpression(
                    expression=total, using_metrics=per_class, label="total USD/h", period=Duration.minutes(5)
                )
            )
        return lines

    # -- alarms ----------------------------------------------------------------------------------
    def _alarm(self, name: str, alarm: cw.Alarm) -> None:
        alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
        self.alarms[name] = alarm

    def _alarms(self) -> None:
        for i, dlq in enumerate(self.props.dlqs):
            self._alarm(
                f"dlq{i}",
                dlq.metric_approximate_number_of_messages_visible(
                    period=_MINUTE, statistic="Maximum"
                ).create_alarm(
                    self,
                    f"DlqDepth{i}",
                    alarm_description="Messages reached a dead-letter queue (poison or repeatedly failed)",
                    threshold=1,
                    evaluation_periods=1,
                    comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                    treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
                ),
            )
        task_queue_age = cw.MathExpression(
            expression='SELECT MAX(ApproximateAgeOfOldestMessage) FROM SCHEMA("AWS/SQS", QueueName)',
            label="oldest message, every queue (s)",
            period=_MINUTE,
        )
        self._alarm(
            "queue_age",
            task_queue_age.create_alarm(
                self,
                "QueueAge",
                alarm_description=f"A queue's oldest message is older than {C.QUEUE_AGE_ALARM_S} s: "
                "workers are missing or too slow for the plan",
                threshold=C.QUEUE_AGE_ALARM_S,
                evaluation_periods=3,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            ),
        )
        slo = cw.MathExpression(
            expression=f"SELECT MIN({C.SLO_ATTAINMENT_METRIC}) FROM SCHEMA({C.METRICS_NAMESPACE}, App)",
            label="SLO attainment, worst app",
            period=Duration.minutes(5),
        )
        self._alarm(
            "slo",
            slo.create_alarm(
                self,
                "SloAttainment",
                alarm_description=f"An app met its SLO for less than {C.SLO_ATTAINMENT_ALARM:.0%} of frames",
                threshold=C.SLO_ATTAINMENT_ALARM,
                evaluation_periods=3,
                comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            ),
        )
        self._alarm(
            "front_errors",
            self.props.front.metric_errors(period=_MINUTE, statistic="Sum").create_alarm(
                self,
                "FrontErrors",
                alarm_description="The front function failed (uncaught errors, not 4xx answers)",
                threshold=1,
                evaluation_periods=5,
                datapoints_to_alarm=3,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            ),
        )

    # -- dashboard -------------------------------------------------------------------------------
    def _dashboard(self) -> cw.Dashboard:
        ns = C.METRICS_NAMESPACE
        dims = f"{{{ns},App,Hardware,Module}}"
        board = cw.Dashboard(
            self, "Dashboard", dashboard_name=C.DASHBOARD_NAME, default_interval=Duration.hours(3)
        )
        board.add_widgets(
            cw.GraphWidget(
                title="Cost per hour by hardware (USD/h)", left=self.cost_per_hour(), width=12, stacked=True
            ),
            cw.GraphWidget(
                title="SLO attainment (fraction of frames within the SLO)",
                left=[_search(f'{{{ns},App}} MetricName="{C.SLO_ATTAINMENT_METRIC}"', "Average", "")],
                left_y_axis=cw.YAxisProps(min=0, max=1),
                width=12,
            ),
        )
        board.add_widgets(
            cw.GraphWidget(
                title="Queue age (s, oldest message per queue)",
                left=[
                    _search(
                        '{AWS/SQS,QueueName} MetricName="ApproximateAgeOfOldestMessage" '
                        + C.QUEUE_NAME_PREFIX.rstrip("-"),
                        "Maximum",
                        "",
                    )
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Batch fill (requests per batch / batch size)",
                left=[_search(f'{dims} MetricName="BatchFill"', "Average", "")],
                left_y_axis=cw.YAxisProps(min=0, max=1),
                width=12,
            ),
        )
        board.add_widgets(
            cw.GraphWidget(
                title="Drops (deadline) and rejections",
                left=[
                    _search(f'{dims} MetricName="Drops"', "Sum", ""),
                    _search(f'{{{ns},App,Reason}} MetricName="FrontRejected"', "Sum", ""),
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Frames accepted and module latency (ms)",
                left=[_search(f'{{{ns},App}} MetricName="FramesAccepted"', "Sum", "")],
                right=[_search(f'{dims} MetricName="ModuleLatencyMs"', "Maximum", "")],
                width=12,
            ),
        )
        board.add_widgets(
            cw.GraphWidget(
                title="Front function",
                left=[
                    self.props.front.metric_invocations(),
                    self.props.front.metric_errors(),
                    self.props.front.metric_throttles(),
                ],
                right=[self.props.front.metric_duration(statistic="p99")],
                width=8,
            ),
            cw.GraphWidget(
                title="API",
                left=[self.props.api.metric_client_error(), self.props.api.metric_server_error()],
                right=[self.props.api.metric_latency(statistic="p99")],
                width=8,
            ),
            cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=8),
        )
        return board
