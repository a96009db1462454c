"""aws_cdk.assertions on the invariants that matter: encryption, DLQs, authentication, worker
isolation, least privilege. Templates come from the session's single synthesis."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from aws_cdk.assertions import Match, Template

from cdk import constants as C
from tests.infra.conftest import REST_CONTEXT, resources

if TYPE_CHECKING:
    from tests.infra.conftest import Assembly

pytestmark = pytest.mark.infra


@pytest.fixture(scope="module")
def t(assembly: Assembly) -> dict[str, Template]:
    return {name: Template.from_json(doc) for name, doc in assembly.templates().items()}


def test_every_stack_synthesized(assembly: Assembly) -> None:
    assert set(assembly.templates()) == set(C.ALL_STACKS)


def test_stateful_stack_has_termination_protection(assembly: Assembly) -> None:
    artifacts = assembly.manifest()["artifacts"]
    assert artifacts[C.STATEFUL_STACK]["properties"]["terminationProtection"] is True


# -- encryption and data protection ------------------------------------------------------------------
def test_tables_encrypted_with_pitr_and_retained(t: dict[str, Template]) -> None:
    s = t[C.STATEFUL_STACK]
    s.resource_count_is("AWS::DynamoDB::Table", 2)
    s.all_resources_properties(
        "AWS::DynamoDB::Table",
        {
            "SSESpecification": {"SSEEnabled": True},
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "DeletionProtectionEnabled": True,
        },
    )
    s.all_resources("AWS::DynamoDB::Table", {"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"})


def test_buckets_encrypted_private_and_tls_only(t: dict[str, Template], assembly: Assembly) -> None:
    s = t[C.STATEFUL_STACK]
    s.all_resources_properties(
        "AWS::S3::Bucket",
        {
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {"ServerSideEncryptionByDefault": {"SSEAlgorithm": Match.any_value()}}
                ]
            },
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "BlockPublicPolicy": True,
                "IgnorePublicAcls": True,
                "RestrictPublicBuckets": True,
            },  # fmt: skip
            "LifecycleConfiguration": {"Rules": Match.any_value()},
        },
    )
    buckets = resources(assembly.template(C.STATEFUL_STACK), "AWS::S3::Bucket")
    policies = resources(assembly.template(C.STATEFUL_STACK), "AWS::S3::BucketPolicy")
    tls_denied = {
        p["Properties"]["Bucket"]["Ref"]
        for p in policies.values()
        for st in p["Properties"]["PolicyDocument"]["Statement"]
        if st["Effect"] == "Deny"
        and st.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
    }
    assert tls_denied == set(buckets)
    frames = next(b for b in buckets.values() if "BucketName" in b["Properties"])
    rules = {r["Id"]: r for r in frames["Properties"]["LifecycleConfiguration"]["Rules"] if "Id" in r}
    assert rules["frames"]["ExpirationInDays"] == C.FRAMES_EXPIRE_DAYS
    assert "LoggingConfiguration" in frames["Properties"]


def test_every_queue_encrypted_tls_only_and_has_a_dlq(assembly: Assembly) -> None:
    doc = assembly.template(C.STATEFUL_STACK)
    queues = resources(doc, "AWS::SQS::Queue")
    assert queues
    for q in queues.values():
        assert q["Properties"].get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in q["Properties"]
    dlq_targets = {
        q["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
        for q in queues.values()
        if "RedrivePolicy" in q["Properties"]
    }
    dlq_names = {C.TASKS_DLQ_NAME, C.FLEET_EVENTS_DLQ_NAME}
    for lid, q in queues.items():
        if q["Properties"]["QueueName"] in dlq_names:
            continue  # a DLQ needs no DLQ
        assert "RedrivePolicy" in q["Properties"], f"{lid} has no DLQ"
    assert dlq_targets <= set(queues)
    tls = {
        ref["Ref"]
        for p in resources(doc, "AWS::SQS::QueuePolicy").values()
        for st in p["Properties"]["PolicyDocument"]["Statement"]
        if st["Effect"] == "Deny"
        and st.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
        for ref in p["Properties"]["Queues"]
    }
    assert tls == set(queues)


def test_alarm_topic_encrypted_and_tls_only(t: dict[str, Template]) -> None:
    o = t[C.OBSERVABILITY_STACK]
    o.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": Match.any_value()})
    o.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
                        )
                    ]
                )
            }
        },
    )
    o.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


# -- API authentication, logging, throttling ---------------------------------------------------------
# Default (-c front_api=http): an HTTP API, its $default route to the front, which checks the key.
# -c front_api=rest: the REST API, an API key + usage plan on every method, a WAF web ACL.
def test_http_api_is_the_default_with_no_waf(t: dict[str, Template], assembly: Assembly) -> None:
    f = t[C.FRONT_STACK]
    f.resource_count_is("AWS::ApiGatewayV2::Api", 1)
    f.has_resource_properties("AWS::ApiGatewayV2::Api", {"ProtocolType": "HTTP"})
    # HTTP APIs cannot have a WAF web ACL; nor a usage plan or API key
    doc = assembly.template(C.FRONT_STACK)
    kinds = {r["Type"] for r in doc["Resources"].values()}
    assert not {k for k in kinds if k.startswith(("AWS::WAFv2::", "AWS::ApiGateway::"))}, kinds
    assert set(doc["Outputs"]) >= {"ApiUrl"} and "ApiKeyId" not in doc["Outputs"]


def test_http_api_routes_everything_to_the_front_with_payload_2(assembly: Assembly) -> None:
    doc = assembly.template(C.FRONT_STACK)
    (route,) = resources(doc, "AWS::ApiGatewayV2::Route").values()
    (lid, integration), *_ = resources(doc, "AWS::ApiGatewayV2::Integration").items()
    assert route["Properties"]["RouteKey"] == "$default"
    assert route["Properties"]["Target"] == {"Fn::Join": ["", ["integrations/", {"Ref": lid}]]}
    p = integration["Properties"]
    assert (p["IntegrationType"], p["PayloadFormatVersion"]) == ("AWS_PROXY", "2.0")
    (fn,) = [
        k
        for k, r in resources(doc, "AWS::Lambda::Function").items()
        if r["Properties"]["Handler"] == C.FRONT_HANDLER
    ]
    assert p["IntegrationUri"] == {"Fn::GetAtt": [fn, "Arn"]}


def test_http_stage_throttles_and_logs(t: dict[str, Template], assembly: Assembly) -> None:
    f = t[C.FRONT_STACK]
    f.has_resource_properties(
        "AWS::ApiGatewayV2::Stage",
        {
            # $default: served at the root of the URL, so no stage segment reaches the app's paths
            "StageName": "$default",
            "AutoDeploy": True,
            "DefaultRouteSettings": {
                "ThrottlingRateLimit": C.API_RATE_LIMIT_RPS,
                "ThrottlingBurstLimit": C.API_BURST,
            },
            "AccessLogSettings": {"DestinationArn": Match.any_value(), "Format": Match.any_value()},
        },
    )
    (stage,) = resources(assembly.template(C.FRONT_STACK), "AWS::ApiGatewayV2::Stage").values()
    fields = json.loads(stage["Properties"]["AccessLogSettings"]["Format"])
    assert fields["requestId"] == "$context.requestId" and "status" in fields
    (group,) = [
        g for k, g in resources(assembly.template(C.FRONT_STACK), "AWS::Logs::LogGroup").items()
        if k == stage["Properties"]["AccessLogSettings"]["DestinationArn"]["Fn::GetAtt"][0]
    ]  # fmt: skip
    assert group["Properties"]["RetentionInDays"] == 30


def test_every_app_route_but_healthz_checks_a_key_itself() -> None:
    """Behind the HTTP API nothing checks a key before the function: every FastAPI route but
    /healthz depends on the app's API key check (front/app.py ``_authed`` -> front/service.py
    ``authenticate``; the OpenAPI docs included), except the admin route POST /v1/apps, which checks
    the admin key (front/admin.py ``AdminService.authenticate``; behind the REST API, API Gateway
    also requires the x-api-key there)."""
    import time

    from fastapi.routing import APIRoute
    from fastapi.testclient import TestClient

    from front.admin import AdminService
    from front.app import _authed, create_app

    def checks(dependant: Any) -> bool:
        return any(d.call is _authed or checks(d) for d in dependant.dependencies)

    app = create_app(
        lambda: None,  # type: ignore[arg-type, return-value]  # routes only, no backend
        admin_factory=lambda: AdminService(store=None, registrar=None, clock=time.monotonic),  # type: ignore[arg-type]
    )
    routes = {
        (method, r.path): checks(r.dependant)
        for r in app.routes
        if isinstance(r, APIRoute)
        for method in r.methods
    }
    assert ("GET", "/v1/apps") in routes and ("POST", "/v1/apps/{app_name}/frames") in routes, routes
    assert {route for route, ok in routes.items() if not ok} == {("GET", "/healthz"), ("POST", "/v1/apps")}
    response = TestClient(app).post("/v1/apps", content=b"name: x", headers={"x-api-key": "any"})
    assert (response.status_code, response.json()["error"]) == (401, "missing_admin_key")


def test_mangum_serves_the_http_apis_payload_2() -> None:
    """The front's Mangum handler reads the HTTP API's payload 2.0 events (rawPath without a stage:
    the $default stage), as it reads the REST API's 1.0 ones."""
    from mangum import Mangum

    from front.app import create_app

    handler = Mangum(create_app(lambda: None), lifespan="off")  # type: ignore[arg-type, return-value]
    event = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/healthz",
        "rawQueryString": "",
        "headers": {"host": "abc123.execute-api.us-east-1.amazonaws.com", "x-forwarded-proto": "https"},
        "requestContext": {
            "apiId": "abc123",
            "stage": "$default",
            "requestId": "id",
            "routeKey": "$default",
            "http": {"method": "GET", "path": "/healthz", "protocol": "HTTP/1.1", "sourceIp": "192.0.2.1"},
        },
        "isBase64Encoded": False,
    }
    response = handler(event, type("Context", (), {"aws_request_id": "id"})())
    assert response["statusCode"] == 200 and json.loads(response["body"]) == {"ok": True}


def test_every_rest_method_requires_an_api_key(rest_assembly: Assembly) -> None:
    methods = resources(rest_assembly.template(C.FRONT_STACK), "AWS::ApiGateway::Method")
    assert len(methods) >= 2  # root ANY and {proxy+} ANY
    for lid, m in methods.items():
        assert m["Properties"]["ApiKeyRequired"] is True, f"{lid} is open"


def _api_paths(doc: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """API Gateway resource path -> its methods' logical ids (the root is "/")."""
    res = resources(doc, "AWS::ApiGateway::Resource")

    def path(ref: Any) -> str:
        if isinstance(ref, dict) and "Ref" in ref and ref["Ref"] in res:
            parent = res[ref["Ref"]]["Properties"]
            return path(parent["ParentId"]).rstrip("/") + "/" + parent["PathPart"]
        return "/"  # Fn::GetAtt RestApi.RootResourceId

    out: dict[str, list[str]] = {}
    for lid, m in resources(doc, "AWS::ApiGateway::Method").items():
        out.setdefault(path(m["Properties"]["ResourceId"]), []).append(lid)
    return {k: tuple(v) for k, v in out.items()}


def test_every_app_route_goes_through_a_keyed_rest_method(rest_assembly: Assembly) -> None:
    """REST variant: each FastAPI route, the admin route POST /v1/apps included, resolves to an API
    Gateway method that requires the API key (the app then checks the frame or admin key itself)."""
    from front.app import create_app

    doc = rest_assembly.template(C.FRONT_STACK)
    methods = resources(doc, "AWS::ApiGateway::Method")
    paths = _api_paths(doc)
    app = create_app(lambda: None)  # type: ignore[arg-type, return-value]  # routes only, no backend
    routes = {(m, r.path) for r in app.routes for m in getattr(r, "methods", ()) if m not in ("HEAD",)}
    assert ("POST", "/v1/apps") in routes and ("POST", "/v1/apps/{app_name}/frames") in routes, routes
    for method, route in routes:
        exact = paths.get(route)
        lids = exact if exact is not None else paths["/{proxy+}"]  # greedy proxy catches the rest
        (lid,) = [x for x in lids if methods[x]["Properties"]["HttpMethod"] in (method, "ANY")]
        assert methods[lid]["Properties"]["ApiKeyRequired"] is True, (method, route)


def test_rest_api_has_usage_plan_waf_access_logs_and_throttling(rest_assembly: Assembly) -> None:
    """The REST variant keeps today's API: its limits follow the context (REST_CONTEXT)."""
    f = Template.from_json(rest_assembly.template(C.FRONT_STACK))
    rate, burst = int(REST_CONTEXT["api_rate"]), int(REST_CONTEXT["api_burst"])
    f.has_resource_properties(
        "AWS::ApiGateway::Stage",
        {
            "StageName": C.API_STAGE,
            "AccessLogSetting": {"DestinationArn": Match.any_value(), "Format": Match.any_value()},
            "MethodSettings": Match.array_with(
                [Match.object_like({"ThrottlingRateLimit": rate, "ThrottlingBurstLimit": burst})]
            ),
        },
    )
    f.has_resource_properties(
        "AWS::ApiGateway::UsagePlan",
        {
            "Quota": {"Limit": int(REST_CONTEXT["api_quota"]), "Period": "DAY"},
            "Throttle": {"RateLimit": rate, "BurstLimit": burst},
        },
    )
    f.resource_count_is("AWS::ApiGateway::UsagePlanKey", 1)
    f.resource_count_is("AWS::ApiGatewayV2::Api", 0)
    f.resource_count_is("AWS::WAFv2::WebACLAssociation", 1)
    f.has_resource_properties("AWS::WAFv2::WebACL", {"Scope": "REGIONAL", "DefaultAction": {"Allow": {}}})
    (acl,) = resources(rest_assembly.template(C.FRONT_STACK), "AWS::WAFv2::WebACL").values()
    (per_ip,) = [r for r in acl["Properties"]["Rules"] if r["Name"] == "PerIpRate"]
    assert per_ip["Statement"]["RateBasedStatement"]["Limit"] == int(REST_CONTEXT["waf_rate"])
    f.has_resource_properties("AWS::ApiGateway::RestApi", {"BinaryMediaTypes": ["image/jpeg", "image/png"]})
    outputs = rest_assembly.template(C.FRONT_STACK)["Outputs"]
    assert {"ApiUrl", "ApiKeyId"} <= set(outputs)


def test_both_variants_grant_the_front_the_same(assembly: Assembly, rest_assembly: Assembly) -> None:
    """The API changes nothing the function may do (IAM); only who may invoke it (a Lambda
    permission for API Gateway, scoped to the one API)."""

    def policies(a: Assembly) -> list[Any]:
        return [r["Properties"] for r in resources(a.template(C.FRONT_STACK), "AWS::IAM::Policy").values()
                if "FrontRole" in json.dumps(r["Properties"]["Roles"])]  # fmt: skip

    assert policies(assembly) == policies(rest_assembly) != []
    for a in (assembly, rest_assembly):
        perms = resources(a.template(C.FRONT_STACK), "AWS::Lambda::Permission").values()
        assert perms and all(p["Properties"]["Principal"] == "apigateway.amazonaws.com" for p in perms)
        assert all("execute-api" in json.dumps(p["Properties"]["SourceArn"]) for p in perms)


# -- functions ---------------------------------------------------------------------------------------
def _functions(assembly: Assembly) -> dict[str, dict[str, Any]]:
    out = {}
    for stack in (C.FRONT_STACK, C.CONTROL_STACK):
        for lid, fn in resources(assembly.template(stack), "AWS::Lambda::Function").items():
            out[fn["Properties"]["Handler"]] = fn | {"stack": stack, "id": lid}
    return out


def test_functions_handlers_concurrency_powertools_and_own_roles(assembly: Assembly) -> None:
    fns = _functions(assembly)
    assert set(fns) == {C.FRONT_HANDLER, C.PLANNER_HANDLER}
    roles = set()
    for handler, fn in fns.items():
        p = fn["Properties"]
        # a new account's regional limit (10) leaves nothing to reserve: none by default
        assert "ReservedConcurrentExecutions" not in p, handler
        assert any("AWSLambdaPowertoolsPythonV3" in str(layer) for layer in p["Layers"]), handler
        assert p["Environment"]["Variables"]["SKINFLINT_CONFIG_TABLE"], handler
        roles.add((fn["stack"], p["Role"]["Fn::GetAtt"][0]))
    assert len(roles) == len(fns)  # one role per function


def test_planner_runs_every_minute_and_on_fleet_events(t: dict[str, Template]) -> None:
    c = t[C.CONTROL_STACK]
    c.has_resource_properties(
        "AWS::Events::Rule", {"ScheduleExpression": "rate(1 minute)", "State": "ENABLED"}
    )
    c.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
            "ScalingConfig": {"MaximumConcurrency": C.FLEET_EVENTS_CONCURRENCY},
        },
    )
    # the epoch, the backlog check and the fleet-event batches never throttle each other
    assert C.PLANNER_RESERVED_CONCURRENCY >= C.FLEET_EVENTS_CONCURRENCY + 2


# -- fleet -------------------------------------------------------------------------------------------
def test_one_group_per_hardware_class_with_drain_hook(assembly: Assembly) -> None:
    doc = assembly.template(C.FLEET_STACK)
    groups = resources(doc, "AWS::AutoScaling::AutoScalingGroup")
    names = {g["Properties"]["AutoScalingGroupName"] for g in groups.values()}
    assert {"skinflint-workers-t4", "skinflint-workers-v100", "skinflint-workers-c6i-large"} <= names
    for g in groups.values():
        assert "DesiredCapacity" not in g["Properties"]  # the planner owns it
        assert g["Properties"]["MinSize"] == "0"
    hooks = [h["Properties"] for h in resources(doc, "AWS::AutoScaling::LifecycleHook").values()]
    # each group: the drain hook (termination) and the boot hook (launch: ABANDON unless completed)
    drains = [h for h in hooks if h["LifecycleHookName"] == C.DRAIN_HOOK_NAME]
    boots = [h for h in hooks if h["LifecycleHookName"] == C.BOOT_HOOK_NAME]
    assert len(drains) == len(boots) == len(groups) and len(hooks) == 2 * len(groups)
    assert all(h["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_TERMINATING" for h in drains)
    assert all(h["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_LAUNCHING" for h in boots)
    assert all(h["DefaultResult"] == "ABANDON" for h in boots)


def test_workers_imdsv2_no_public_ip_encrypted_ebs(assembly: Assembly) -> None:
    templates = resources(assembly.template(C.FLEET_STACK), "AWS::EC2::LaunchTemplate")
    assert templates
    for lid, lt in templates.items():
        data = lt["Properties"]["LaunchTemplateData"]
        assert data["MetadataOptions"]["HttpTokens"] == "required", lid
        assert all(ni["AssociatePublicIpAddress"] is False for ni in data["NetworkInterfaces"]), lid
        assert all(bd["Ebs"]["Encrypted"] is True for bd in data["BlockDeviceMappings"]), lid
        assert "ImageId" in data and "Ref" in data["ImageId"], lid  # public SSM parameter, resolved at deploy
        user_data = str(data["UserData"])
        assert "workers.instance" in user_data and "systemctl enable --now skinflint-worker" in user_data, lid


def test_vpc_is_isolated_with_endpoints(assembly: Assembly) -> None:
    doc = assembly.template(C.FLEET_STACK)
    for rtype in ("AWS::EC2::InternetGateway", "AWS::EC2::NatGateway", "AWS::EC2::EIP"):
        assert not resources(doc, rtype), f"the worker VPC must have no {rtype}"
    services = {str(e["Properties"]["ServiceName"]) for e in resources(doc, "AWS::EC2::VPCEndpoint").values()}

    def has(svc: str) -> bool:
        return any(s.rstrip("'\"]}").endswith(svc) or f"{svc}'" in s or f"'{svc}'" in s for s in services)

    for svc in (".s3", ".dynamodb", ".sqs", ".logs", ".autoscaling"):
        assert has(svc), svc
    # the instances call no CloudWatch API (their metrics are EMF lines in their log): no endpoint
    # billed per AZ-hour for it
    assert not has(".monitoring")
    for sn in resources(doc, "AWS::EC2::Subnet").values():
        assert sn["Properties"]["MapPublicIpOnLaunch"] is False
    Template.from_json(doc).has_resource_properties("AWS::EC2::FlowLog", {"TrafficType": "ALL"})


def test_worker_security_group_has_no_ingress(assembly: Assembly) -> None:
    doc = assembly.template(C.FLEET_STACK)
    sg = next(v for k, v in resources(doc, "AWS::EC2::SecurityGroup").items() if k.startswith("WorkerSg"))
    assert not sg["Properties"].get("SecurityGroupIngress")


# -- IAM ---------------------------------------------------------------------------------------------
def _statements(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for lid, r in doc["Resources"].items():
        props = r.get("Properties", {})
        if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            out += [(lid, s) for s in props["PolicyDocument"]["Statement"]]
        if r["Type"] == "AWS::IAM::Role":
            out += [(lid, s) for p in props.get("Policies", []) for s in p["PolicyDocument"]["Statement"]]
    return out


def test_no_wildcard_action_in_any_policy(assembly: Assembly) -> None:
    for stack, doc in assembly.templates().items():
        for lid, st in _statements(doc):
            actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            for a in actions:
                assert a != "*" and not a.endswith(":*"), f"{stack}/{lid}: {a}"


def test_our_roles_use_no_managed_policies(assembly: Assembly) -> None:
    """Only the API Gateway account role (acknowledged) may carry an AWS managed policy; CDK's own
    custom-resource provider roles are not ours."""
    for stack, doc in assembly.templates().items():
        for lid, r in resources(doc, "AWS::IAM::Role").items():
            if r["Properties"].get("ManagedPolicyArns"):
                assert lid.startswith(("ApiCloudWatchRole", "CustomVpcRestrictDefaultSG")), f"{stack}/{lid}"


def test_put_metric_data_is_pinned_to_the_namespace(assembly: Assembly) -> None:
    for doc in assembly.templates().values():
        for lid, st in _statements(doc):
            actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            if "cloudwatch:PutMetricData" in actions:
                assert st["Condition"]["StringEquals"]["cloudwatch:namespace"] == C.METRICS_NAMESPACE, lid


# -- observability -----------------------------------------------------------------------------------
def test_dashboard_and_alarms(assembly: Assembly) -> None:
    doc = assembly.template(C.OBSERVABILITY_STACK)
    body = str(resources(doc, "AWS::CloudWatch::Dashboard"))
    for needle in ("Cost per hour by hardware", "SLO attainment", "Queue age", "Batch fill", "Drops"):
        assert needle in body, needle
    alarms = resources(doc, "AWS::CloudWatch::Alarm")
    text = str(alarms)
    assert "ApproximateNumberOfMessagesVisible" in text  # DLQ depth
    assert "ApproximateAgeOfOldestMessage" in text
    assert C.SLO_ATTAINMENT_METRIC in text
    assert all(a["Properties"].get("AlarmActions") for a in alarms.values())
