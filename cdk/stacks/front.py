"""Front stack: a REST API (API key + usage plan on every method, WAF, access logs, throttling) in
front of the front function (FastAPI + Mangum).

REST rather than HTTP API: API keys, usage plans (per-key quota and throttle) and AWS WAF exist only
on REST APIs (docs/design.md §6), and cameras are machine clients for which a key is the natural
credential. The app re-checks the key against the hashed keys in the config table; the admin route
(``POST /v1/apps``, front/admin.py) also needs an admin key, checked the same way.

The front invokes the planner by its fixed name after a registration, so this stack depends on the
control stack and the control stack on nothing here (no cycle)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_cdk import CfnOutput, RemovalPolicy, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_wafv2 as waf

from cdk import constants as C
from cdk.lambdas import PythonFunctionSpec, python_function
from cdk.nag import acknowledge
from cdk.policies import cdk_queue_arns, list_bucket_statement, queues_arn

if TYPE_CHECKING:
    from pathlib import Path

    from aws_cdk import aws_dynamodb as ddb
    from aws_cdk import aws_s3 as s3
    from constructs import Construct

__all__ = ["FrontStack", "FrontStackProps"]

BINARY_MEDIA_TYPES = ["image/jpeg", "image/png"]  # API Gateway passes these to Lambda base64-encoded


@dataclass(frozen=True)
class FrontStackProps:
    code_dir: Path
    config_table: ddb.ITable
    results_table: ddb.ITable
    bucket: s3.IBucket
    reserved_concurrency: int | None
    powertools_layer_version: int
    planner_function_name: str  # invoked (asynchronously) after an app registration
    api_rate: int = C.API_RATE_LIMIT_RPS  # requests/s: the stage's and the usage plan's throttle
    api_burst: int = C.API_BURST  # requests
    api_quota: int = C.API_QUOTA_PER_DAY  # requests per key per day
    waf_rate: int = C.WAF_RATE_LIMIT_PER_5MIN  # requests per client IP per 5 minutes


class FrontStack(Stack):
    """``function``, ``api``, ``api_key``, ``web_acl``."""

    def __init__(self, scope: Construct, construct_id: str, props: FrontStackProps, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.function, role = python_function(
            self,
            PythonFunctionSpec(
                name="Front",
                handler=C.FRONT_HANDLER,
                code_dir=props.code_dir,
                memory_mb=C.FRONT_MEMORY_MB,
                timeout_s=C.FRONT_TIMEOUT_S,
                reserved_concurrency=props.reserved_concurrency,
                description="Skinflint front API: accept frames, dispatch them to queues, serve results",
                powertools_layer_version=props.powertools_layer_version,
                # core/settings.py DataPlaneConfig; front/admin.py
                environment={
                    "SKINFLINT_CONFIG_TABLE": props.config_table.table_name,
                    "SKINFLINT_RESULTS_TABLE": props.results_table.table_name,
                    "SKINFLINT_RESULTS_RETENTION_DAYS": str(C.RESULTS_RETENTION_DAYS),
                    "SKINFLINT_BUCKET": props.bucket.bucket_name,
                    "SKINFLINT_METRICS_NAMESPACE": C.METRICS_NAMESPACE,
                    "SKINFLINT_PLANNER_FUNCTION": props.planner_function_name,
                    "SKINFLINT_BATCH_OVERHEAD_S": str(C.BATCH_OVERHEAD_S),  # the planner's (registration)
                    # several Lambda instances admit frames: count each window's frames in DynamoDB
                    # (core/adapters/slots.py), one conditional write per frame
                    "SKINFLINT_ADMISSION_SHARED": "on",
                },
            ),
        )
        self._grant(role, props)
        self.api = self._api(props)
        self.web_acl = self._waf(props)
        CfnOutput(
            self,
            "ApiUrl",
            value=self.api.url,
            description="Base URL of the front API (ends with the stage and a slash)",
        )
        CfnOutput(
            self,
            "ApiKeyId",
            value=self.api_key.key_id,
            description="aws apigateway get-api-key --include-value",
        )

    def _api(self, props: FrontStackProps) -> apigw.RestApi:
        access_logs = logs.LogGroup(
            self, "AccessLogs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY
        )
        api = apigw.RestApi(
            self,
            "Api",
            rest_api_name="skinflint",
            description="Skinflint front API",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            binary_media_types=BINARY_MEDIA_TYPES,
            cloud_watch_role=True,
            deploy_options=apigw.StageOptions(
                stage_name=C.API_STAGE,
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),  # fmt: skip
                logging_level=apigw.MethodLoggingLevel.ERROR,
                metrics_enabled=True,
                throttling_rate_limit=props.api_rate,
                throttling_burst_limit=props.api_burst,
            ),
        )
        validator = api.add_request_validator(
            "Validator", validate_request_parameters=True, validate_request_body=True
        )
        integration = apigw.LambdaIntegration(self.function)
        options: dict[str, Any] = {"api_key_required": True, "request_validator": validator}
        api.root.add_method("ANY", integration, **options)
        api.root.add_resource("{proxy+}").add_method("ANY", integration, **options)
        self.api_key = api.add_api_key("Key", api_key_name=C.API_KEY_NAME)
        plan = api.add_usage_plan(
            "Plan",
            name=C.USAGE_PLAN_NAME,
            throttle=apigw.ThrottleSettings(rate_limit=props.api_rate, burst_limit=props.api_burst),
            quota=apigw.QuotaSettings(limit=props.api_quota, period=apigw.Period.DAY),
            api_stages=[apigw.UsagePlanPerApiStage(api=api, stage=api.deployment_stage)],
        )
        plan.add_api_key(self.api_key)
        acknowledge(
            api,
            "AwsSolutions-APIG4",
            "Every method requires an API key tied to a usage plan (quota, throttle), WAF filters the stage, "
            "and the function re-verifies the key against the hashed keys in the config table; clients are "
            "cameras and pipelines (machine to machine), for which IAM or Cognito authorizers add no check.",
        )
        acknowledge(
            self.function,
            "AwsSolutions-L1",
            "Python 3.13: the newest runtime for which the public Powertools v3 layer and our dependency "
            "layer are built (cdk/constants.py LAMBDA_PYTHON); raise both together.",
        )
        acknowledge(
            api,
            "AwsSolutions-COG4",
            "No Cognito user pool: clients are machines authenticated by API key (see AwsSolutions-APIG4).",
        )
        acknowledge(
            api,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs]",
            "The account-level role API Gateway uses to write execution logs; AWS's managed policy is the "
            "documented one and only allows CloudWatch Logs writes.",
        )
        return api

    def _waf(self, props: FrontStackProps) -> waf.CfnWebACL:
        def visibility(name: str) -> waf.CfnWebACL.VisibilityConfigProperty:
            return waf.CfnWebACL.VisibilityConfigProperty(
                cloud_watch_metrics_enabled=True, metric_name=name, sampled_requests_enabled=True
            )

        def managed(
            priority: int, name: str, overrides: list[str] | None = None
        ) -> waf.CfnWebACL.RuleProperty:
            return waf.CfnWebACL.RuleProperty(
                name=name,
                priority=priority,
                override_action=waf.CfnWebACL.OverrideActionProperty(none={}),
                statement=waf.CfnWebACL.StatementProperty(
                    managed_rule_group_statement=waf.CfnWebACL.ManagedRuleGroupStatementProperty(
                        vendor_name="AWS",
                        name=name,
                        rule_action_overrides=[
                            waf.CfnWebACL.RuleActionOverrideProperty(
                                name=rule, action_to_use=waf.CfnWebACL.RuleActionProperty(count={})
                            )
                            for rule in overrides or []
                        ]
                        or None,
                    )
                ),
                visibility_config=visibility(name),
            )

        acl = waf.CfnWebACL(
            self,
            "WebAcl",
            scope="REGIONAL",
            default_action=waf.CfnWebACL.DefaultActionProperty(allow={}),
            visibility_config=visibility("skinflint-front"),
            rules=[
                # frames are image bodies far above the common rule set's 8 KB body limit: count, not block
                managed(0, "AWSManagedRulesCommonRuleSet", overrides=["SizeRestrictions_BODY"]),
                managed(1, "AWSManagedRulesKnownBadInputsRuleSet"),
                waf.CfnWebACL.RuleProperty(
                    name="PerIpRate",
                    priority=2,
                    action=waf.CfnWebACL.RuleActionProperty(block={}),
                    statement=waf.CfnWebACL.StatementProperty(
                        rate_based_statement=waf.CfnWebACL.RateBasedStatementProperty(
                            limit=props.waf_rate, aggregate_key_type="IP"
                        )
                    ),
                    visibility_config=visibility("PerIpRate"),
                ),
            ],
        )
        waf.CfnWebACLAssociation(
            self,
            "WebAclAssociation",
            resource_arn=self.api.deployment_stage.stage_arn,
            web_acl_arn=acl.attr_arn,
        )
        return acl

    def _grant(self, role: iam.Role, props: FrontStackProps) -> None:
        region, account, part = self.region, self.account, self.partition
        frames = C.frames_bucket_arn(part, account, region, f"{C.FRAMES_PREFIX}*")
        registry = C.frames_bucket_arn(part, account, region, f"{C.REGISTRY_PREFIX}*")
        profiles = C.frames_bucket_arn(part, account, region, f"{C.PROFILES_PREFIX}*")
        planner = f"arn:{part}:lambda:{region}:{account}:function:{props.planner_function_name}"
        for statement in (
            # keys (API and admin), the plan in force (pointer + documents), registered apps, state
            iam.PolicyStatement(
                sid="ConfigRead",
                actions=["dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Scan"],
                resources=[props.config_table.table_arn],
            ),
            # registration writes only the app's index item and the planning request
            iam.PolicyStatement(
                sid="ConfigRegister",
                actions=["dynamodb:PutItem", "dynamodb:UpdateItem"],
                resources=[props.config_table.table_arn],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": list(C.FRONT_CONFIG_KEYS)}},
            ),
            # POST items (batch write) and a request's results (one Query of its POST's partition)
            iam.PolicyStatement(
                sid="Results",
                actions=["dynamodb:BatchWriteItem", "dynamodb:Query"],
                resources=[props.results_table.table_arn],
            ),
            # admission's shared batch-slot counts (conditional ADD), only their keys
            iam.PolicyStatement(
                sid="SlotCounts",
                actions=["dynamodb:UpdateItem"],
                resources=[props.results_table.table_arn],
                conditions={
                    "ForAllValues:StringLike": {"dynamodb:LeadingKeys": list(C.FRONT_RESULTS_UPDATE_KEYS)}
                },
            ),
            # dispatch (SendMessageBatch) and the admission backlog check (queue depth)
            iam.PolicyStatement(
                sid="Dispatch",
                actions=["sqs:SendMessage", "sqs:GetQueueAttributes"],
                resources=[queues_arn(part, account, region)],
            ),
            iam.PolicyStatement(
                sid="NotTheStackQueues",
                effect=iam.Effect.DENY,
                actions=["sqs:SendMessage", "sqs:GetQueueAttributes"],
                resources=cdk_queue_arns(part, account, region),
            ),
            iam.PolicyStatement(sid="FramesOut", actions=["s3:PutObject"], resources=[frames]),
            iam.PolicyStatement(sid="SpecsOut", actions=["s3:PutObject"], resources=[registry]),
            iam.PolicyStatement(sid="ProfilesIn", actions=["s3:GetObject"], resources=[profiles]),
            list_bucket_statement(part, account, region),
            iam.PolicyStatement(sid="StartPlanner", actions=["lambda:InvokeFunction"], resources=[planner]),
            # no cloudwatch:PutMetricData: the function writes its metrics as Embedded Metric Format
            # lines to its own log group (functions/front.py), which OwnLogs already allows
        ):
            role.add_to_policy(statement)
        reasons = {
            f"Resource::{queues_arn(part, account, region)}": (
                "The front sends to the task queues the planner creates at run time (named "
                f"{C.QUEUE_NAME_PREFIX}<app>-...); the prefix is the narrowest scope known at deploy time."
            ),
            f"Resource::{frames}": "Frames over the SQS size limit are written under frames/<request id>.",
            f"Resource::{registry}": (
                "POST /v1/apps stores each registered spec as registry/apps/<app>/r<revision>.json, and "
                "the plan its feasibility check solved as r<revision>.seed.json."
            ),
            f"Resource::{profiles}": (
                "Registration reads the catalog override and stored profiles under profiles/ (profile store)."
            ),
        }
        for finding, reason in reasons.items():
            acknowledge(role, f"AwsSolutions-IAM5[{finding}]", reason)
