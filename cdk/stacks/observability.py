"""Observability stack: one dashboard and the alarms, on the metrics the code emits (namespace
``Skinflint``; tests/infra checks every metric name here against the code that puts it):

- cost per hour by hardware: the instance agents' ``InstanceSeconds`` (Hardware, State; every state
  is billed) summed per period x the catalog's price, next to the planner's planned cost
  (``BilledCostPerHour``) and what EC2 runs (the groups' in-service instances x price);
- SLO attainment (``SloAttainment``, App: 0/1 per finished frame, so the average is the fraction
  within the SLO) and end-to-end latency (``EndToEndLatencyMs``, App);
- queue age (AWS/SQS), batch fill (``BatchFill``), drops (``Drops``, ``FramesDropped``) and the
  front's rejections (``FrontRejected``); the planner (``PlanningFailures``, ``CarriedApps``,
  ``ShedTargetUnmet``, ``EpochMs``, ``PlannedInstances``) and the front function.

Alarms (DLQ depth, queue age, SLO attainment, planning failures, plans carried for long, shed targets
no reserve meets, frames unaccounted for, front errors) notify an encrypted SNS topic."""

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
    from aws_cdk import aws_apigatewayv2 as apigwv2
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_logs as logs
    from aws_cdk import aws_sqs as sqs
    from constructs import Construct

    from cdk.config import HardwareClass

__all__ = ["ObservabilityStack", "ObservabilityStackProps"]

_MINUTE = Duration.seconds(C.ALARM_PERIOD_S)
_COST = Duration.seconds(C.COST_PERIOD_S)
NS = C.METRICS_NAMESPACE


@dataclass(frozen=True)
class ObservabilityStackProps:
    hardware: tuple[HardwareClass, ...]
    dlqs: tuple[sqs.IQueue, ...]
    fleet_events: sqs.IQueue
    front: lambda_.IFunction
    front_logs: logs.ILogGroup  # the front function's log group: its metrics are EMF lines there
    planner: lambda_.IFunction
    api: apigw.RestApi | apigwv2.HttpApi  # the front's (-c front_api): both have these metrics
    alarm_email: str | None = None
    front_usage_metered: bool = True  # SKINFLINT_USAGE_METERING of the front: its invocation count


def _search(schema: str, metric: str, stat: str, period_s: int = C.ALARM_PERIOD_S, extra: str = "") -> str:
    """A SEARCH over the exact dimension set ``schema`` (e.g. ``App,Hardware,Module``)."""
    term = f'{{{NS},{schema}}} MetricName="{metric}"' + (f" {extra}" if extra else "")
    return f"SEARCH('{term}', '{stat}', {period_s})"


def _expr(
    expression: str, label: str = "", period_s: int = C.ALARM_PERIOD_S, **using: cw.IMetric
) -> cw.MathExpression:
    return cw.MathExpression(
        expression=expression, using_metrics=using, label=label, period=Duration.seconds(period_s)
    )


def _insights(query: str, label: str, period: Duration) -> cw.MathExpression:
    return cw.MathExpression(expression=query, label=label, period=period)


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

    # -- cost --------------------------------------------------------------------------------------
    def cost_per_hour(self) -> list[cw.IMetric]:
        """USD/h per hardware class from the instance agents: the class's ``InstanceSeconds`` (all
        states) summed over the period, / the period = instances on average, x the catalog price;
        plus the total (a class without data counts 0)."""
        lines: dict[str, cw.MathExpression] = {}
        for i, hw in enumerate(self.props.hardware):
            seconds = _search(
                "Hardware,State", C.INSTANCE_SECONDS_METRIC, "Sum", C.COST_PERIOD_S, f'Hardware="{hw.name}"'
            )
            lines[f"c{i}"] = _expr(
                f"SUM({seconds}) * {hw.price_per_hour} / {C.COST_PERIOD_S}",
                f"{hw.name} ({hw.instance_type}) USD/h",
                C.COST_PERIOD_S,
            )
        out: list[cw.IMetric] = list(lines.values())
        if lines:
            total = " + ".join(f"FILL({metric_id}, 0)" for metric_id in lines)
            out.append(_expr(total, "total USD/h", C.COST_PERIOD_S, **lines))
        return out

    def ec2_cost_per_hour(self) -> cw.MathExpression | None:
        """USD/h of the instances EC2 runs (the groups' in-service instances x price): the bill,
        booting and draining instances included."""
        using: dict[str, cw.IMetric] = {}
        terms: list[str] = []
        for i, hw in enumerate(self.props.hardware):
            using[f"n{i}"] = cw.Metric(
                namespace="AWS/AutoScaling",
                metric_name="GroupInServiceInstances",
                dimensions_map={"AutoScalingGroupName": hw.asg_name},
                statistic="Average",
                period=_COST,
            )
            terms.append(f"FILL(n{i}, 0) * {hw.price_per_hour}")
        if not terms:
            return None
        return _expr(" + ".join(terms), "EC2 in service USD/h", C.COST_PERIOD_S, **using)

    def planned_cost(self) -> cw.Metric:
        return cw.Metric(
            namespace=NS,
            metric_name="BilledCostPerHour",
            statistic="Average",
            period=_COST,
            label="planned USD/h (planner)",
        )

    def planning_failures(self) -> cw.Metric:
        return cw.Metric(
            namespace=NS, metric_name=C.PLANNING_FAILURES_METRIC, statistic="Maximum", period=_MINUTE
        )

    def carried_apps(self, statistic: str, period: Duration) -> cw.Metric:
        return cw.Metric(namespace=NS, metric_name=C.CARRIED_APPS_METRIC, statistic=statistic, period=period)

    def shed_target_unmet(self, statistic: str, period: Duration) -> cw.Metric:
        return cw.Metric(
            namespace=NS, metric_name=C.SHED_TARGET_UNMET_METRIC, statistic=statistic, period=period
        )

    # -- alarms ------------------------------------------------------------------------------------
    def _alarm(self, name: str, alarm: cw.Alarm) -> None:
        alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
        self.alarms[name] = alarm

    def _level_alarm(
        self, name: str, alarm_id: str, metric: cw.Metric, minutes: int, description: str
    ) -> None:
        """An alarm on a count the planner emits every epoch: above 0 for ``minutes`` running (5-minute
        periods of ``metric``; no data, a planner not running, is the planning alarm's)."""
        self._alarm(
            name,
            metric.create_alarm(
                self,
                alarm_id,
                alarm_description=description,
                threshold=0,
                evaluation_periods=minutes // 5,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            ),
        )

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
        # every queue of the region but the stack's dead-letter queues (alarmed above); Metrics
        # Insights cannot filter by name prefix, so another application's queues count too
        not_dlqs = " AND ".join(
            f"QueueName != '{name}'" for name in (C.TASKS_DLQ_NAME, C.FLEET_EVENTS_DLQ_NAME)
        )
        queue_age = _insights(
            f'SELECT MAX(ApproximateAgeOfOldestMessage) FROM SCHEMA("AWS/SQS", QueueName) WHERE {not_dlqs}',
            "oldest message, every queue but the DLQs (s)",
            _MINUTE,
        )
        self._alarm(
            "queue_age",
            queue_age.create_alarm(
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
        # SloAttainment is 0 or 1 per frame: an app's AVG is its attainment; the worst app decides
        slo = _insights(
            f"SELECT AVG({C.SLO_ATTAINMENT_METRIC}) FROM SCHEMA({NS}, App) GROUP BY App "
            "ORDER BY AVG() ASC LIMIT 1",
            "SLO attainment, worst app",
            Duration.seconds(C.SLO_PERIOD_S),
        )
        self._alarm(
            "slo",
            slo.create_alarm(
                self,
                "SloAttainment",
                alarm_description=f"An app met its SLO for less than {C.SLO_ATTAINMENT_ALARM:.0%} of its "
                f"frames over {C.SLO_PERIOD_S // 60} minutes, 3 periods running",
                threshold=C.SLO_ATTAINMENT_ALARM,
                evaluation_periods=3,
                comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            ),
        )
        # a worker boot failed (cdk/userdata.py logs it, the fleet stack's metric filter counts it): its
        # instance was abandoned, and Auto Scaling will keep launching and abandoning until fixed
        self._alarm(
            "boot",
            cw.Metric(
                namespace=NS, metric_name=C.BOOT_FAILURES_METRIC, statistic="Sum", period=Duration.minutes(5)
            ).create_alarm(
                self,
                "BootFailures",
                alarm_description="A worker instance failed its boot (no wheelhouse, no GPU, execution "
                "provider not loaded, ...) and was abandoned: see boot/<instance> in "
                f"{C.WORKER_LOG_GROUP}",
                threshold=1,
                evaluation_periods=1,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            ),
        )
        # every epoch emits 0 or 1; no data means the planner is not running (or fails before it
        # can plan: a bad environment, an unreadable catalog)
        self._alarm(
            "planning",
            self.planning_failures().create_alarm(
                self,
                "PlanningFailures",
                alarm_description="The planner failed 2 of the last 3 epochs, or stopped running (no "
                "data); the last good plan stays in force",
                threshold=1,
                evaluation_periods=3,
                datapoints_to_alarm=2,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.BREACHING,
            ),
        )
        # every epoch emits the count of apps on a carried plan; one that stays above 0 for half an hour
        # means the solve budget never catches up (the plans serve, but cost more than they need to)
        self._level_alarm(
            "carried",
            "CarriedPlans",
            self.carried_apps("Minimum", Duration.minutes(5)),
            C.CARRIED_ALARM_MINUTES,
            f"Apps have stayed on carried plans for {C.CARRIED_ALARM_MINUTES} minutes: the planner's solve "
            "budget (SKINFLINT_SOLVE_BUDGET_S) is too small for the fleet",
        )
        # every epoch emits the count of apps whose shed_target no admission reserve meets at the rate
        # their reserve was last chosen for (control/reserves.py)
        self._level_alarm(
            "shed_target",
            "ShedTargetUnmet",
            self.shed_target_unmet("Minimum", Duration.minutes(5)),
            C.SHED_TARGET_ALARM_MINUTES,
            f"For {C.SHED_TARGET_ALARM_MINUTES} minutes an app's shed_target has not been met by any "
            "admission reserve at its current rate: its front sheds more than the target; register it "
            "with a longer SLO or a larger shed_target",
        )
        # the stranded-frame sweeper (control/sweeper.py) emits every epoch how many frames past their
        # deadline are neither answered nor dropped with a reason: the "nothing lost" invariant
        self._alarm(
            "unaccounted",
            cw.Metric(
                namespace=NS, metric_name="FramesUnaccounted", statistic="Maximum", period=Duration.minutes(5)
            ).create_alarm(
                self,
                "FramesUnaccounted",
                alarm_description="Accepted frames past their deadline are neither answered nor dropped "
                "with a reason (accepted = answered + dropped + in flight does not hold): the sweeper's "
                "log names them",
                threshold=0,
                evaluation_periods=1,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
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

        self._metrics_alarms()

    def front_metrics_missing(self) -> cw.MathExpression:
        """1 in a 5-minute period where the front function ran at least 20 times but its own count of
        those invocations (the usage meter's ``AwsRequests`` for ``lambda Invocation``, in its EMF
        lines) came to less than half: its metrics are not reaching CloudWatch, whatever the cause
        (lines rejected, not shipped, not written)."""
        period = Duration.minutes(5)
        ran = self.props.front.metric_invocations(period=period, statistic="Sum")
        counted = cw.Metric(
            namespace=NS,
            metric_name="AwsRequests",
            dimensions_map={"Component": "front", "Service": "lambda", "Operation": "Invocation"},
            statistic="Sum",
            period=period,
        )
        return _expr(
            "IF(ran >= 20 AND FILL(counted, 0) < 0.5 * ran, 1, 0)",
            "front invocations its metrics miss",
            300,
            ran=ran,
            counted=counted,
        )

    def _metrics_alarms(self) -> None:
        # the front's and the instances' metrics are EMF lines in their logs: lines CloudWatch Logs
        # rejects would silently lose FramesAccepted (the planner would see less load than arrives)
        self._at_least_one(
            "emf",
            "EmfErrors",
            self.emf_errors(),
            "CloudWatch Logs could not extract metrics from Embedded Metric Format lines of the front or "
            "the instances (AWS/Logs EMFValidationErrors, EMFParsingErrors): their metrics, the frame "
            "rates the planner reads among them, are being lost",
            periods=1,
        )
        # the deployed front counts every root window's frames in DynamoDB (SKINFLINT_ADMISSION_SHARED);
        # when it cannot, each front instance admits on its own count and windows can overfill
        self._at_least_one(
            "slot_counts",
            "SlotCountsUnavailable",
            self.slot_counter_errors(),
            "The front could not read or update the shared batch-slot counts in DynamoDB for 10 minutes: "
            "its instances admit on their own counts, windows can take more frames than the plan sized "
            "the modules below for, and frames may be dropped late instead of refused",
            periods=2,
        )
        if self.props.front_usage_metered:
            self._at_least_one(
                "front_metrics",
                "FrontMetricsMissing",
                self.front_metrics_missing(),
                "The front function ran, but its metrics did not reach CloudWatch for 10 minutes (its own "
                "invocation count came to less than half of Lambda's): the planner reads the frame rates "
                "from them and would plan for less load than arrives",
                periods=2,
            )

    def _at_least_one(
        self, key: str, construct_id: str, metric: cw.MathExpression, description: str, periods: int
    ) -> None:
        """An alarm when ``metric`` is at least 1 for ``periods`` periods running (no data: fine)."""
        self._alarm(
            key,
            metric.create_alarm(
                self,
                construct_id,
                alarm_description=description,
                threshold=1,
                evaluation_periods=periods,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            ),
        )

    def slot_counter_errors(self) -> cw.MathExpression:
        """Windows the front admitted on its own count because the shared slot counts could not be
        read (``SlotCounterErrors``, front/service.py), every app, summed over 5 minutes."""
        return _insights(
            f"SELECT SUM(SlotCounterErrors) FROM SCHEMA({NS}, App)",
            "windows admitted without the shared counts",
            Duration.minutes(5),
        )

    def emf_errors(self) -> cw.MathExpression:
        """EMF lines CloudWatch Logs rejected (validation or parsing) in the front's and the workers'
        log groups, summed over 5 minutes."""
        groups = (self.props.front_logs.log_group_name, C.WORKER_LOG_GROUP)
        using: dict[str, cw.IMetric] = {}
        for i, group in enumerate(groups):
            for kind in ("Validation", "Parsing"):
                using[f"{kind[0].lower()}{i}"] = cw.Metric(
                    namespace="AWS/Logs",
                    metric_name=f"EMF{kind}Errors",
                    dimensions_map={"LogGroupName": group},
                    statistic="Sum",
                    period=Duration.minutes(5),
                )
        expression = " + ".join(f"FILL({metric_id}, 0)" for metric_id in using)
        return _expr(expression, "EMF lines rejected", 300, **using)

    # -- dashboard ---------------------------------------------------------------------------------
    def _dashboard(self) -> cw.Dashboard:
        module = "App,Hardware,Module"  # the workers' dimensions (workers/worker.py)
        board = cw.Dashboard(
            self, "Dashboard", dashboard_name=C.DASHBOARD_NAME, default_interval=Duration.hours(3)
        )
        ec2 = self.ec2_cost_per_hour()
        board.add_widgets(
            cw.GraphWidget(
                title="Cost per hour by hardware (USD/h: InstanceSeconds x catalog price)",
                left=self.cost_per_hour(),
                width=12,
                stacked=True,
            ),
            cw.GraphWidget(
                title="Planned vs EC2 in service (USD/h)",
                left=[self.planned_cost(), *([ec2] if ec2 is not None else [])],
                width=12,
            ),
        )
        board.add_widgets(
            cw.GraphWidget(
                title="SLO attainment (fraction of frames within the SLO, per app)",
                left=[
                    _expr(
                        _search("App", C.SLO_ATTAINMENT_METRIC, "Average", C.SLO_PERIOD_S), "", C.SLO_PERIOD_S
                    )
                ],
                left_y_axis=cw.YAxisProps(min=0, max=1),
                width=12,
            ),
            cw.GraphWidget(
                title="End-to-end latency per app (ms, average and maximum)",
                left=[
                    _expr(_search("App", "EndToEndLatencyMs", "Average")),
                    _expr(_search("App", "EndToEndLatencyMs", "Maximum")),
                ],
                width=12,
            ),
        )
        board.add_widgets(
            cw.GraphWidget(
                title="Queue age (s, oldest message per task queue)",
                left=[
                    _expr(
                        'SEARCH(\'{AWS/SQS,QueueName} MetricName="ApproximateAgeOfOldestMessage" '
                        f"{C.QUEUE_NAME_PREFIX.rstrip('-')}', 'Maximum', {C.ALARM_PERIOD_S})"
                    )
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Batch fill (requests per batch / batch size)",
                left=[_expr(_search(module, "BatchFill", "Average"))],
                left_y_axis=cw.YAxisProps(min=0, max=1),
                width=12,
            ),
        )
        board.add_widgets(
            cw.GraphWidget(
                title="Drops (tasks past their deadline, frames dropped) and front rejections",
                left=[
                    _expr(_search(module, "Drops", "Sum")),
                    _expr(_search("App", "FramesDropped", "Sum")),
                ],
                right=[
                    _expr(_search("App,Reason", "FrontRejected", "Sum")),
                    _expr(_search("Reason", "FrontRejected", "Sum")),
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Frames accepted and module latency (ms)",
                left=[_expr(_search("App", "FramesAccepted", "Sum"))],
                right=[_expr(_search(module, "ModuleLatencyMs", "Maximum"))],
                width=12,
            ),
        )
        board.add_widgets(
            cw.GraphWidget(
                title="Planner: failed epochs and apps, apps on a carried plan, unmet shed targets; "
                "epoch time (ms)",
                left=[
                    self.planning_failures(),
                    _expr(_search("App", C.PLANNING_FAILURES_METRIC, "Maximum")),
                    self.carried_apps("Maximum", _MINUTE),
                    self.shed_target_unmet("Maximum", _MINUTE),
                ],
                right=[cw.Metric(namespace=NS, metric_name="EpochMs", statistic="Maximum", period=_MINUTE)],
                width=12,
            ),
            cw.GraphWidget(
                title="Planned instances per hardware",
                left=[_expr(_search("Hardware", "PlannedInstances", "Maximum"))],
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
