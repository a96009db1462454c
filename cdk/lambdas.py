"""A Python function the Skinflint way: its own log group (retention), its own role with only the
log permissions here (callers add the rest), the Powertools layer and the dependency layer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aws_cdk import Annotations, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs

from cdk import constants as C
from cdk.assets import dependency_dir

if TYPE_CHECKING:
    from pathlib import Path

    from constructs import Construct

__all__ = ["PythonFunctionSpec", "python_function", "RUNTIME"]

RUNTIME = lambda_.Runtime.PYTHON_3_13
_LAYER_NAME = "AWSLambdaPowertoolsPythonV3-python{v}-x86_64"


@dataclass(frozen=True)
class PythonFunctionSpec:
    name: str  # construct id and part of the description
    handler: str  # module.function
    code_dir: Path  # staged source packages
    memory_mb: int
    timeout_s: int
    reserved_concurrency: int | None  # None: unreserved (the account pool)
    description: str
    powertools_layer_version: int
    environment: dict[str, str] = field(default_factory=dict)
    function_name: str | None = None  # fixed physical name (another stack refers to it by name)


def python_function(scope: Construct, spec: PythonFunctionSpec) -> tuple[lambda_.Function, iam.Role]:
    stack = Stack.of(scope)
    log_group = logs.LogGroup(
        scope,
        f"{spec.name}Logs",
        retention=logs.RetentionDays.ONE_MONTH,
        removal_policy=RemovalPolicy.DESTROY,
    )
    role = iam.Role(
        scope,
        f"{spec.name}Role",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        description=f"Skinflint {spec.name} function: only what it calls",
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="OwnLogs",
            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
            resources=[log_group.log_group_arn],
        )
    )
    powertools = lambda_.LayerVersion.from_layer_version_arn(
        scope,
        f"{spec.name}Powertools",
        f"arn:{stack.partition}:lambda:{stack.region}:{C.POWERTOOLS_ACCOUNT}:layer:"
        f"{_LAYER_NAME.format(v=C.LAMBDA_PYTHON.replace('.', ''))}:{spec.powertools_layer_version}",
    )
    layers: list[lambda_.ILayerVersion] = [powertools]
    deps = dependency_dir(C.LAMBDA_DEPS_DIR, "python")
    if deps is not None:
        layers.append(
            lambda_.LayerVersion(
                scope,
                f"{spec.name}Deps",
                code=lambda_.Code.from_asset(str(deps)),
                compatible_runtimes=[RUNTIME],
                description="fastapi, mangum, pydantic, numpy, pyyaml (python -m cdk.deps lambda)",
            )
        )
    else:
        Annotations.of(scope).add_warning_v2(
            "skinflint:lambda-deps",
            f"{C.LAMBDA_DEPS_DIR}/python is missing: run `python -m cdk.deps lambda` before `cdk deploy` "
            "(the functions import fastapi, mangum, pydantic, numpy and pyyaml from that layer)",
        )
    fn = lambda_.Function(
        scope,
        spec.name,
        runtime=RUNTIME,
        architecture=lambda_.Architecture.X86_64,
        handler=spec.handler,
        function_name=spec.function_name,
        code=lambda_.Code.from_asset(str(spec.code_dir)),
        memory_size=spec.memory_mb,
        timeout=Duration.seconds(spec.timeout_s),
        reserved_concurrent_executions=spec.reserved_concurrency,
        description=spec.description,
        role=role,
        log_group=log_group,
        layers=layers,
        environment={
            "POWERTOOLS_SERVICE_NAME": C.SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": C.METRICS_NAMESPACE,
            "POWERTOOLS_LOG_LEVEL": "INFO",
            **spec.environment,
        },
    )
    return fn, role
