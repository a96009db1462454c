"""Create the data plane's resources and write a deployment (the same names CDK would use).

Queues: one per machine of every module's config groups, each with a redrive policy to the app's
DLQ. Per machine (not per group) because a time-window batch belongs to one machine: a worker must
receive exactly its own windows' requests to close them on time (docs/dataplane.md)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from core.adapters._aws import AWS_ERRORS
from core.adapters.results import EXPIRES_AT
from core.errors import ConfigError
from core.schema import Assignment, Deployment, queue_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from core.adapters.config_store import ConfigStore
    from core.settings import DataPlaneConfig
    from planner.models import AppSpec, MachineGroup, Plan

__all__ = ["create_base", "create_queues", "deploy", "worker_id"]


def create_base(ddb: Any, s3: Any, cfg: DataPlaneConfig) -> None:
    """Config and results tables (on demand; the results' TTL attribute on) and the frames bucket."""
    try:
        ddb.create_table(
            TableName=cfg.config_table,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        ddb.create_table(
            TableName=cfg.results_table,
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        # as the CDK stack's table (moto records the setting; it never deletes expired items)
        ddb.update_time_to_live(
            TableName=cfg.results_table,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": EXPIRES_AT},
        )
        s3.create_bucket(Bucket=cfg.bucket)
    except AWS_ERRORS as exc:
        raise ConfigError(f"cannot create the base resources: {exc}") from exc


def worker_id(app: str, module: str, group: int, machine: int) -> str:
    return f"{app}.{module}.g{group}.m{machine}"


def create_queues(
    sqs: Any, app: str, plan: Plan, visibility_timeout_s: int = 30, max_receive_count: int = 5
) -> tuple[dict[str, dict[str, str]], str]:
    """One queue per machine with a redrive policy to the app's DLQ; returns (queues, dlq_url)."""
    from control.queues import create_module_queues, ensure_app_dlq

    dlq, dlq_arn = ensure_app_dlq(sqs, app)
    queues = {
        module: create_module_queues(
            sqs,
            app,
            module,
            mp,
            dlq_arn=dlq_arn,
            visibility_timeout_s=visibility_timeout_s,
            max_receive_count=max_receive_count,
        )
        for module, mp in plan.modules.items()
    }
    return queues, dlq


def deploy(
    store: ConfigStore,
    sqs: Any,
    app: AppSpec,
    plan: Plan,
    frame_rate: float,
    *,
    slo_s: float | None = None,
    emulated_hardware: list[str] | None = None,
    model_path: Callable[[str], str | None] = lambda _model: None,
    overhead_s: float = 0.0,
    origin_s: float | None = None,
    version: int = 1,
    visibility_timeout_s: int = 30,
    threads: Callable[[str, MachineGroup], int] = lambda _module, _group: 1,
) -> tuple[Deployment, list[Assignment], str]:
    """Create the queues, write the deployment and one assignment per machine.
    Returns (deployment, assignments, dlq_url)."""
    queues, dlq = create_queues(sqs, app.name, plan, visibility_timeout_s)
    emulated = sorted(set(emulated_hardware or []))
    has_parent = {d for _, d, _ in app.edges}
    deployment = Deployment(
        app=app.name,
        version=version,
        origin_s=time.time() if origin_s is None else origin_s,
        slo_s=slo_s if slo_s is not None else app.slo_s,
        frame_rate=frame_rate,
        roots=[m for m in app.modules if m not in has_parent],
        edges=list(app.edges),
        plan=plan,
        queues=queues,
        emulated_hardware=emulated,
        overhead_s=overhead_s,
    )
    store.put_deployment(deployment)
    assignments: list[Assignment] = []
    for module, mp in plan.modules.items():
        path = model_path(app.modules[module].model)
        for g, group in enumerate(mp.groups):
            for m in range(group.machines):
                a = Assignment(
                    worker_id=worker_id(app.name, module, g, m),
                    app=app.name,
                    module=module,
                    group=g,
                    machine=m,
                    hardware=group.hardware,
                    batch=group.batch,
                    concurrency=group.concurrency,
                    duration_s=group.duration_s,
                    model_s=max(group.duration_s - overhead_s, 0.0),
                    queue_url=queues[module][queue_key(g, m)],
                    runtime="emulated" if group.hardware in emulated or not path else "onnx",
                    model=app.modules[module].model,
                    model_path=None if group.hardware in emulated else path,
                    threads=threads(module, group),
                )
                store.put_assignment(a)
                assignments.append(a)
    return deployment, assignments, dlq
