"""Front stack: an API Gateway API in front of the front function (FastAPI + Mangum), chosen by
``-c front_api`` (cdk/config.py):

- ``http`` (default): an HTTP API, its ``$default`` stage routing every request (``$default`` route,
  payload format 2.0, which Mangum reads) to the function, stage throttling, access logs. No API
  Gateway key check: the function already checks the ``x-api-key`` against the SHA-256 digests in
  the config table (front/service.py ``authenticate``) and applies the per-key rate limits and fair
  share itself (front/admission.py, front/hygiene.py), and serves the OpenAPI (``/docs``). No WAF
  either: an HTTP API cannot have a WAF web ACL associated (WAF protects REST API stages, not HTTP
  APIs). $1.00 per million requests against the REST API's $3.50 + WAF's $0.60 (docs/deploy.md).
- ``rest``: the REST API (API key + usage plan on every method, WAF, access logs, throttling), for
  a deployment that wants WAF's managed rules and per-IP rate rule or API Gateway's usage plans
  (per-key quota and throttle) before the function runs.

Either way the function re-checks the key; the admin route (``POST /v1/apps``, front/admin.py) also
needs an admin key, checked the same way.

The front invokes the planner by its fixed name after a registration, so this stack depends on the
control stack and the control stack on nothing here (no cycle)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jsii
from aws_cdk import CfnOutput, RemovalPolicy, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_integrations as integrations
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

# the REST API passes these to Lambda base64-encoded; the HTTP API's payload 2.0 base64-encodes every
# body that is not text on its own (isBase64Encoded, which Mangum decodes)
BINARY_MEDIA_TYPES = ["image/jpeg", "image/png"]
# the HTTP API's access log line: HTTP API $context variables (no $context.identity.caller/user or
# resourcePath there; routeKey is "$default")
HTTP_ACCESS_LOG_FIELDS = {
    "requestId": "$context.requestId",
    "ip": "$context.identity.sourceIp",
    "requestTime": "$context.requestTime",
    "httpMethod": "$context.httpMethod",
    "path": "$context.path",
    "routeKey": "$context.routeKey",
    "protocol": "$context.protocol",
    "status": "$context.status",
    "responseLength": "$context.responseLength",
    "responseLatency": "$context.responseLatency",
    "integrationError": "$context.integrationErrorMessage",
}


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLogSettings:
    """``IAccessLogSettings`` is a jsii interface, not a struct: Python passes an object, not a dict."""

    def __init__(self, destination: apigwv2.IAccessLogDestination, format: apigw.AccessLogFormat) -> None:  # noqa: A002
        self._destination, self._format = destination, format

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw.AccessLogFormat:
        return self._format


@dataclass(frozen=True)
class FrontStackProps:
    code_dir: Path
    config_table: ddb.ITable
    results_table: ddb.ITable
    bucket: s3.IBucket
    reserved_concurrency: int | None
    powertools_layer_version: int
    planner_function_name: str  # invoked (asynchronously) after an app registration
    front_api: str = C.FRONT_API_HTTP  # C.FRONT_APIS
    api_rate: int = C.API_RATE_LIMIT_RPS  # requests/s: the stage's (and the usage plan's) throttle
    api_burst: int = C.API_BURST  # requests
    api_quota: int = C.API_QUOTA_PER_DAY  # requests per key per day (rest: the usage plan)
    waf_rate: int = C.WAF_RATE_LIMIT_PER_5MIN  # requests per client IP per 5 minutes (rest: WAF)


class FrontStack(Stack):
    """``function``, ``api`` (an HTTP API, or the REST API), ``api_key`` and ``web_acl`` (REST only,
    else None)."""

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
                    # (core/adapters/slots.py), one conditional write per POST and root module
                    "SKINFLINT_ADMISSION_SHARED": "on",
                    # what its requests are metered as (core/adapters/usage.py HttpUsage)
                    "SKINFLINT_FRONT_API": props.front_api,
                },
            ),
        )
        self._grant(role, props)
        acknowledge(
            self.function,
            "AwsSolutions-L1",
            "Python 3.13: the newest runtime for which the public Powertools v3 layer and our dependency "
            "layer are built (cdk/constants.py LAMBDA_PYTHON); raise both together.",
        )
        self.api: apigw.RestApi | apigwv2.HttpApi
        self.api_key: apigw.IApiKey | None = None
        self.web_acl: waf.CfnWebACL | None = None
        if props.front_api == C.FRONT_API_REST:
            self.api = rest = self._rest_api(props)
            self.web_acl = self._waf(props, rest)
            url = rest.url
        else:
            self.api, url = self._http_api(props)
        CfnOutput(
            self,
            "ApiUrl",
            value=url,
            description="Base URL of the front API, ending with a slash (REST: with the stage, /live/)",
        )
        if self.api_key is not None:
            CfnOutput(
                self,
                "ApiKeyId",
                value=self.api_key.key_id,
                description="aws apigateway get-api-key --include-value",
            )

    def _http_api(self, props: FrontStackProps) -> tuple[apigwv2.HttpApi, str]:
        """An HTTP API: the ``$default`` route (every method and path) to the function, payload format
        2.0, on the ``$default`` stage (served at the root of the URL, so no stage segment reaches the
        app's paths), throttled at ``api_rate``/``api_burst`` like the REST stage, access logs.

        No WAF web ACL: AWS WAF cannot be associated with an HTTP API (it protects REST API stages,
        not HTTP APIs); ``-c front_api=rest`` deploys the REST API with WAF instead."""
        access_logs = logs.LogGroup(
            self, "AccessLogs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY
        )
        api = apigwv2.HttpApi(
            self,
            "HttpApi",
            api_name="skinflint",
            description="Skinflint front API (HTTP API; the front function checks the API key)",
            create_default_stage=False,
            default_integration=integrations.HttpLambdaIntegration(
                "Front", self.function, payload_format_version=apigwv2.PayloadFormatVersion.VERSION_2_0
            ),
        )
        stage = apigwv2.HttpStage(
            self,
            "HttpStage",
            http_api=api,
            stage_name="$default",
            auto_deploy=True,
            throttle=apigwv2.ThrottleSettings(rate_limit=props.api_rate, burst_limit=props.api_burst),
            access_log_settings=_AccessLogSettings(
                apigwv2.LogGroupLogDestination(access_logs),
                apigw.AccessLogFormat.custom(json.dumps(HTTP_ACCESS_LOG_FIELDS)),
            ),
        )
        acknowledge(
            api,
            "AwsSolutions-APIG4",
            "The $default route has no API Gateway authorizer on purpose: the front function checks the "
            "x-api-key of every route but /healthz against the SHA-256 digests in the config table "
            "(front/service.py authenticate) and rate-limits per key itself (front/admission.py); an "
            "authorizer would bill a second check per request for the same answer.",
        )
        # (AwsSolutions-COG4, a Cognito authorizer, checks REST methods only; APIG2, request
        # validation, and APIG3, WAF, REST stages only: FastAPI validates, and no WAF fits here)
        return api, stage.url

    def _rest_api(self, props: FrontStackProps) -> apigw.RestApi:
        """The REST API (``-c front_api=rest``): API key + usage plan on every method, WAF (``_waf``)."""
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

    def _waf(self, props: FrontStackProps, api: apigw.RestApi) -> waf.CfnWebACL:
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
            resource_arn=api.deployment_stage.stage_arn,
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
            # POST items (batch write) and a request's results (the POST item and a Query of its records)
            iam.PolicyStatement(
                sid="Results",
                actions=["dynamodb:BatchWriteItem", "dynamodb:GetItem", "dynamodb:Query"],
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
