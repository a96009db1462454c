"""Build the Skinflint CDK app: read the context, validate it, create the stacks, attach cdk-nag.

``python app.py`` (or ``cdk synth``) synthesizes offline: the environment comes from context
(``cdk.json`` pins an account, region and availability zones), AMIs are public SSM parameters
resolved by CloudFormation at deploy time, and Lambda/worker code is copied by Python (no Docker).
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

from cdk import constants as C
from cdk.assets import model_files, stage_packages
from cdk.config import DeployConfig, InfraConfigError

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["build_app", "cdk_json_context", "deploy_config", "main"]


def cdk_json_context() -> dict[str, Any]:
    """The ``context`` of the repository's ``cdk.json`` (the CLI passes it; ``python app.py`` reads it)."""
    path = C.REPO_ROOT / "cdk.json"
    try:
        return dict(json.loads(path.read_text()).get("context", {}))
    except (OSError, ValueError) as exc:
        raise InfraConfigError(f"cannot read {path}: {exc}") from exc


def _context_getter(context: dict[str, Any]) -> Any:
    # the CLI passes -c values (and cdk.json's context) in CDK_CONTEXT_JSON; they win over cdk.json
    cli = json.loads(os.environ.get("CDK_CONTEXT_JSON") or "{}")
    merged = {**context, **cli}
    return merged.get


def deploy_config(context: dict[str, Any] | None = None) -> DeployConfig:
    """The validated settings of ``context`` over cdk.json (the CLI's ``-c`` values win)."""
    return DeployConfig.from_context(_context_getter({**cdk_json_context(), **(context or {})}))


def build_app(context: dict[str, Any] | None = None, outdir: str | None = None, nag: bool = True) -> Any:
    """Validate ``context`` (default: cdk.json + CLI), then build every stack. Raises
    :class:`InfraConfigError` before importing aws_cdk when the context cannot be deployed."""
    ctx = {**cdk_json_context(), **(context or {})}
    config = deploy_config(context)

    # aws_cdk starts jsii (a Node.js process, seconds): only once the context is known to be deployable
    from aws_cdk import App, Environment, Tags

    from cdk.checkov import skip_checkov_findings  # aws_cdk (above)
    from cdk.nag import enable_aws_solutions_checks  # aws_cdk (above)
    from cdk.stacks import (  # aws_cdk (above)
        ControlStack,
        ControlStackProps,
        FleetStack,
        FleetStackProps,
        FrontStack,
        FrontStackProps,
        ObservabilityStack,
        ObservabilityStackProps,
        StatefulStack,
    )

    app = App(context=ctx, outdir=outdir or os.environ.get("CDK_OUTDIR") or str(C.REPO_ROOT / "cdk.out"))
    env = Environment(account=config.account, region=config.region)
    stateful = StatefulStack(
        app, C.STATEFUL_STACK, env=env, description="Skinflint data: tables, bucket, queues"
    )
    fleet = FleetStack(
        app,
        C.FLEET_STACK,
        FleetStackProps(
            hardware=config.hardware,
            spot=config.spot,
            config_table=stateful.config_table,
            results_table=stateful.results_table,
            bucket=stateful.bucket,
            fleet_events=stateful.fleet_events,
            models_dir=config.models_dir,
            max_instances=config.max_instances,
            wheels_dir=config.wheels_dir,
        ),
        env=env,
        description="Skinflint workers: isolated VPC, endpoints, one Auto Scaling group per hardware class",
    )
    code_dir = stage_packages("lambda", C.LAMBDA_PACKAGES)
    control = ControlStack(
        app,
        C.CONTROL_STACK,
        ControlStackProps(
            code_dir=code_dir,
            config_table=stateful.config_table,
            results_table=stateful.results_table,
            bucket=stateful.bucket,
            tasks_dlq=stateful.tasks_dlq,
            fleet_events=stateful.fleet_events,
            asg_names={hw.name: hw.asg_name for hw in config.hardware},
            powertools_layer_version=config.powertools_layer_version,
            reserved_concurrency=config.planner_concurrency,
        ),
        env=env,
        description="Skinflint planner: schedule and fleet events",
    )
    control.add_stack_dependency(fleet, "the planner sizes the fleet's Auto Scaling groups")
    front = FrontStack(
        app,
        C.FRONT_STACK,
        FrontStackProps(
            code_dir=code_dir,
            config_table=stateful.config_table,
            results_table=stateful.results_table,
            bucket=stateful.bucket,
            reserved_concurrency=config.front_concurrency,
            front_api=config.front_api,
            api_rate=config.api_rate,
            api_burst=config.api_burst,
            api_quota=config.api_quota,
            waf_rate=config.waf_rate,
            powertools_layer_version=config.powertools_layer_version,
            planner_function_name=C.PLANNER_FUNCTION_NAME,  # by name: front -> control, never back
        ),
        env=env,
        description=(
            "Skinflint front API: REST API, WAF, front function"
            if config.front_api == C.FRONT_API_REST
            else "Skinflint front API: HTTP API, front function (which checks the API key)"
        ),
    )
    front.add_stack_dependency(control, "POST /v1/apps starts the planner function by name")
    ObservabilityStack(
        app,
        C.OBSERVABILITY_STACK,
        ObservabilityStackProps(
            hardware=config.hardware,
            dlqs=(stateful.tasks_dlq, stateful.fleet_events_dlq),
            fleet_events=stateful.fleet_events,
            front=front.function,
            front_logs=front.function.log_group,
            planner=control.planner,
            api=front.api,
            alarm_email=config.alarm_email,
        ),
        env=env,
        description="Skinflint dashboard and alarms",
    ).add_stack_dependency(fleet, "the dashboard reads the fleet's group metrics")
    Tags.of(app).add("project", "skinflint")
    skip_checkov_findings(app)
    if nag:
        enable_aws_solutions_checks(app)
    return app


def _argv_context(argv: list[str]) -> dict[str, str]:
    """``python app.py -c key=value ...``: the CDK CLI's ``-c`` for offline synthesis."""
    out: dict[str, str] = {}
    it = iter(argv)
    for arg in it:
        if arg in ("-c", "--context"):
            pair = next(it, "")
        elif arg.startswith("--context="):
            pair = arg.removeprefix("--context=")
        else:
            pair = ""
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InfraConfigError(f"expected -c KEY=VALUE arguments (as the CDK CLI takes), got {arg!r}")
        out[key] = value
    return out


def _models_line(models_dir: Path | None) -> str:
    if models_dir is None:
        return "models: none shipped (-c models=none): every share runs emulated"
    files = model_files(models_dir)
    size = sum(path.stat().st_size for path in files) / 1e6
    return f"models: {len(files)} shipped from {models_dir} ({size:.0f} MB before compression)"


def _wheels_line(config: DeployConfig) -> str:
    """Which kinds' wheelhouses ship (python -m cdk.deps worker), and which kinds would fail to boot."""
    from cdk.deps import read_manifest

    parts = []
    for kind in sorted({hw.kind for hw in config.hardware}):
        manifest = read_manifest(kind, config.wheels_dir)
        wheels = manifest.get("wheels") if manifest else None
        parts.append(
            f"{kind} {len(wheels)} wheels" if isinstance(wheels, list) else f"{kind} NOT BUILT (boots fail)"
        )
    return f"wheelhouses: {', '.join(parts)} (python -m cdk.deps worker)"


def _limits_line(config: DeployConfig) -> str:
    from cdk import constants as C

    groups = ", ".join(
        f"{hw.name} {config.max_instances.get(hw.name, C.ASG_MAX_INSTANCES)}" for hw in config.hardware
    )
    front, planner = config.front_concurrency, config.planner_concurrency
    reserved = f"front {front or 'unreserved'}, planner {planner or 'unreserved'}"
    if config.front_api == C.FRONT_API_REST:
        api = (
            f"REST API {config.api_rate} req/s (burst {config.api_burst}, {config.api_quota:,}/day); "
            f"WAF {config.waf_rate:,} per IP per 5 min"
        )
    else:  # no usage plan, no WAF: api_quota and waf_rate do not apply
        api = f"HTTP API {config.api_rate} req/s (burst {config.api_burst}; no WAF)"
    return f"limits: max instances {groups}; {api}; concurrency {reserved}"


def main(argv: list[str] | None = None) -> int:
    try:
        context = _argv_context(sys.argv[1:] if argv is None else argv)
        config = deploy_config(context)
        app = build_app(context)
    except InfraConfigError as exc:
        print(f"skinflint cdk: {exc}", file=sys.stderr)
        return 2
    for line in (_models_line(config.models_dir), _wheels_line(config), _limits_line(config)):
        print(f"skinflint cdk: {line}", file=sys.stderr)
    app.synth()
    return 0
