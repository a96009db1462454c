"""The stacks against the code they deploy: each role allows exactly what its code calls, every
environment variable passed is read, every metric on the dashboard and in an alarm is emitted,
the shipped packages hold every module the entry points import, the drain fits the lifecycle hook.

"What the code calls" is found statically: the first-party modules an entry point can import
(``modulefinder``, lazy imports included) are scanned for the boto3 operations they name. That
over-approximates (a module shared with the CLI names operations the Lambda never reaches), so a
grant must be in it, and the exact grants are spelled below, each with the code that needs it
(checked once against the calls recorded while the functional tests ran; see docs/deploy.md)."""

from __future__ import annotations

import fnmatch
import inspect
import json
import re
import shlex
from functools import cache
from modulefinder import ModuleFinder
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cdk import constants as C
from tests.infra.conftest import CONTEXT, resources

if TYPE_CHECKING:
    from tests.infra.conftest import Assembly

pytestmark = pytest.mark.infra

ROOT = C.REPO_ROOT
FIRST_PARTY = {
    "functions",
    "front",
    "control",
    "core",
    "planner",
    "profiles",
    "workers",
    "skinflint",
    "loadtest",
    "bench",
    "cdk",
}
ENTRY = {
    "planner": ROOT / "functions" / "planner.py",
    "front": ROOT / "functions" / "front.py",
    "worker": ROOT / "workers" / "instance.py",
}
SERVICES = ("dynamodb", "sqs", "s3", "cloudwatch", "autoscaling", "lambda")
# boto3 operation -> the IAM action it needs, where the names differ
_ALIASES = {
    "s3:ListObjectsV2": "s3:ListBucket",
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
    "lambda:Invoke": "lambda:InvokeFunction",
}
_OWN_LOGS = {"logs:CreateLogStream", "logs:PutLogEvents"}  # every function's own log group

# -- the grants, each with who needs it ---------------------------------------------------------------
PLANNER_ACTIONS = _OWN_LOGS | {
    # plan_store.py (pointer, versions in parts, claims, GC), registry.py (index, replan), state.py
    "dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem",
    "dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:Scan",
    "s3:GetObject",  # registry specs, profiles/hardware.json (service.py load_catalog)
    "s3:ListBucket",  # a missing profiles/ key must read 404 (cdk/policies.py)
    "sqs:CreateQueue", "sqs:TagQueue", "sqs:GetQueueAttributes", "sqs:DeleteQueue",  # control/queues.py, gc.py
    "sqs:ListQueues",  # gc.py orphan sweep
    "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeScalingActivities",  # adapters/autoscaling.py
    "autoscaling:SetDesiredCapacity",
    "cloudwatch:GetMetricData",  # adapters/rates.py
    "cloudwatch:PutMetricData",  # adapters/metrics.py
    # the fleet-events SQS event source (Lambda polls on the function's behalf); ReceiveMessage and
    # DeleteMessage also on the task queues, with SendMessage: gc.py moves stranded messages (rehome.py),
    # and the sweep sends a push app's due messages to its results queue (sweeper.py)
    "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueUrl",
    "sqs:SendMessage",
    "dynamodb:Query",  # the stranded-frame sweep: deadline index, POST partitions (due_index.py, results.py)
}  # fmt: skip
# CreateQueue with tags= needs TagQueue too (control/queues.py create_module_queues)
_TAG_ON_CREATE = {"sqs:TagQueue"}
_EVENT_SOURCE = {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueUrl"}
FRONT_ACTIONS = _OWN_LOGS | {
    "dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Scan",  # keys, plan in force, apps
    "dynamodb:PutItem", "dynamodb:UpdateItem",  # admin.py: appspec#<app>, control#replan; slots.py
    "dynamodb:BatchWriteItem",  # adapters/results.py: POST items
    "dynamodb:Query",  # adapters/results.py: GET /v1/requests/{id} reads its POST's records
    "sqs:SendMessage",  # adapters/queues.py send (SendMessageBatch)
    "sqs:GetQueueAttributes",  # front/admission.py backlog check (TaskQueues.depth)
    "s3:PutObject",  # frames/ (service.py), registry/ (admin registration)
    "s3:GetObject", "s3:ListBucket",  # profile store: catalog and stored profiles
    "lambda:InvokeFunction",  # admin.py starts the planner after a registration
    # no cloudwatch:PutMetricData: the Lambda front writes its metrics as EMF log lines (functions/front.py)
}  # fmt: skip
WORKER_ACTIONS = {
    "dynamodb:GetItem", "dynamodb:BatchGetItem",  # plan_store.py reads, registry.py
    "dynamodb:PutItem",  # claims, heartbeats (config)
    "dynamodb:BatchWriteItem", "dynamodb:Query",  # results.py: terminal tasks' records; a redelivery's check
    "dynamodb:DeleteItem",  # plan_store.py release (conditional)
    "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:SendMessage",
    "sqs:GetQueueAttributes",  # adapters/queues.py; depth before an old share retires; SendMessage: a
    # push app's results queue too (results.py PushSink)
    "s3:GetObject",  # frames/ (worker.py), registry/ (instance.py resolver), profiles/ (onsite.py)
    "s3:PutObject",  # outputs/ (worker.py), frames/ (crops.py), profiles/data/ (onsite.py: measured on the instance)
    "s3:ListBucket",  # profiles/ (profiles/s3store.py, the on-instance sweep's store)
    # no cloudwatch:PutMetricData: metrics as EMF lines in the agent's log (cdk/userdata.py)
    "autoscaling:CompleteLifecycleAction",  # workers/lifecycle.py; the boot hook (cdk/userdata.py)
    "autoscaling:SetInstanceHealth",  # workers/instance.py: a failed boot check marks itself unhealthy
    "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams",  # the CloudWatch agent
}  # fmt: skip
_WORKER_INFRA = {"logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"}


# -- static analysis of the code ---------------------------------------------------------------------
@cache
def closure(entry: Path) -> tuple[Path, ...]:
    """First-party source files ``entry`` can import (lazy imports inside functions included)."""
    finder = ModuleFinder(path=[str(ROOT)])
    finder.run_script(str(entry))
    found = (getattr(m, "__file__", None) for m in finder.modules.values())
    files = {Path(f) for f in found if f and f.startswith(str(ROOT))}
    return tuple(sorted(files | {entry}))


@cache
def _operations() -> dict[str, str]:
    """snake_case boto3 operation -> IAM action, for the services the code uses."""
    import botocore.session
    from botocore import xform_name

    session = botocore.session.get_session()
    out: dict[str, str] = {}
    for svc in SERVICES:
        model = session.get_service_model(svc)
        prefix = {"monitoring": "cloudwatch"}.get(model.signing_name, model.signing_name)
        for op in model.operation_names:
            action = f"{prefix}:{op}"
            out.setdefault(xform_name(op), _ALIASES.get(action, action))
    return out


def called_actions(entry: Path) -> set[str]:
    """IAM actions of every boto3 operation named (called, paginated or getattr'd) in the closure."""
    ops = _operations()
    text = "\n".join(p.read_text() for p in closure(entry))
    named = set(re.findall(r"\.([a-z][a-z0-9_]+)\(", text)) | set(
        re.findall(r"[\"']([a-z][a-z0-9_]+)[\"']", text)
    )
    return {ops[n] for n in named if n in ops}


def _allowed(doc: dict[str, Any], role_prefix: str) -> list[dict[str, Any]]:
    """Allow statements of the policies attached to the role whose logical id starts with ``role_prefix``."""
    out: list[dict[str, Any]] = []
    for r in resources(doc, "AWS::IAM::Policy").values():
        roles = [x.get("Ref", "") for x in r["Properties"].get("Roles", [])]
        if any(name.startswith(role_prefix) for name in roles):
            out += [s for s in r["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    return out


def _actions(statements: list[dict[str, Any]]) -> set[str]:
    return {a for s in statements for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}


# -- IAM: exactly what the code calls -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("stack", "role", "entry", "expected", "infra_only"),
    [
        (
            C.CONTROL_STACK,
            "PlannerRole",
            "planner",
            PLANNER_ACTIONS,
            _OWN_LOGS | _EVENT_SOURCE | _TAG_ON_CREATE,
        ),
        (C.FRONT_STACK, "FrontRole", "front", FRONT_ACTIONS, _OWN_LOGS),
        (C.FLEET_STACK, "Rolet4", "worker", WORKER_ACTIONS, _WORKER_INFRA),
    ],
)
def test_role_allows_exactly_what_its_code_calls(
    assembly: Assembly, stack: str, role: str, entry: str, expected: set[str], infra_only: set[str]
) -> None:
    granted = _actions(_allowed(assembly.template(stack), role))
    assert granted == expected, (sorted(granted - expected), sorted(expected - granted))
    called = called_actions(ENTRY[entry])
    never_called = granted - infra_only - called
    assert not never_called, f"{role} is granted actions its code never names: {sorted(never_called)}"


# -- IAM: DynamoDB actions per table -----------------------------------------------------------------
# Which table each module that makes DynamoDB calls works on (its docstring says so). A new module
# naming a DynamoDB operation must be added here, so its calls are checked against the right table.
TABLE_OF_MODULE = {
    "core/adapters/config_store.py": "config",  # deployments, hashed keys
    "core/adapters/plan_store.py": "config",  # plan pointer, versions, claims, heartbeats
    "core/adapters/config_items.py": "config",  # control#state, app index, replan request
    "control/registration/store.py": "config",  # app index, replan request (through config_items.py)
    "control/state.py": "config",  # control#state
    "core/adapters/results.py": "results",  # POST items, records per batch and POST, a POST's Query
    "core/adapters/slots.py": "results",  # admission's shared batch-slot counts (front)
    "core/adapters/due_index.py": "results",  # the frames' deadline index (the planner's sweep)
}
TABLE_GRANTS = {  # role -> table -> the DynamoDB actions it holds there
    "planner": {
        "config": {a for a in PLANNER_ACTIONS if a.startswith("dynamodb:") and a != "dynamodb:Query"},
        # the stranded-frame sweep (control/sweeper.py): POST items by due minute, records, stranded records
        "results": {"dynamodb:Query", "dynamodb:BatchWriteItem"},
    },
    "front": {
        "config": {"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Scan", "dynamodb:PutItem",
                   "dynamodb:UpdateItem"},
        "results": {"dynamodb:BatchWriteItem", "dynamodb:Query",  # POST items; GET /v1/requests
                    "dynamodb:GetItem",  # GET /v1/requests: the POST item (results.py post_head)
                    "dynamodb:UpdateItem"},  # slots.py: shared batch-slot counts (slot#* keys only)
    },
    "worker": {
        "config": {"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"},
        "results": {"dynamodb:BatchWriteItem", "dynamodb:Query"},  # records; a redelivery's check
    },
}  # fmt: skip
# Operations a module in the role's import closure names on a table but the role never reaches there,
# each with the code path that does reach it. Exact: an entry that stops applying fails the test too.
NOT_REACHED = {
    "planner": {
        ("results", "dynamodb:GetItem"): "results.py post_head: the front's GET (the sweep lists POST items)",
    },
    "front": {
        ("config", "dynamodb:BatchWriteItem"): "plan_store.py publish/GC: the planner",
        ("config", "dynamodb:DeleteItem"): "plan_store.py claims and GC, registry.py remove: planner, CLI",
    },
    "worker": {
        ("results", "dynamodb:GetItem"): "results.py post_head: the front's GET",
        ("config", "dynamodb:Scan"): "config_store.py/registry.py listings: front, planner, CLI",
        ("config", "dynamodb:BatchWriteItem"): "plan_store.py publish/GC: the planner",
        ("config", "dynamodb:UpdateItem"): "plan_store.py pointer flip, registry.py: planner, front",
    },
}
_ROLE_OF = {
    "planner": (C.CONTROL_STACK, "PlannerRole"),
    "front": (C.FRONT_STACK, "FrontRole"),
    "worker": (C.FLEET_STACK, "Rolet4"),
}


def _dynamodb_named(path: Path) -> set[str]:
    text = path.read_text()
    named = set(re.findall(r"\.([a-z][a-z0-9_]+)\(", text)) | set(
        re.findall(r"[\"']([a-z][a-z0-9_]+)[\"']", text)
    )
    return {a for n in named if (a := _operations().get(n, "")).startswith("dynamodb:")}


def called_per_table(entry: Path) -> dict[str, set[str]]:
    """table -> DynamoDB actions the modules of ``entry``'s closure name on it."""
    out: dict[str, set[str]] = {"config": set(), "results": set()}
    for path in closure(entry):
        named = _dynamodb_named(path)
        if not named:
            continue
        rel = path.relative_to(ROOT).as_posix()
        assert rel in TABLE_OF_MODULE, f"{rel} names {sorted(named)}: which table? (TABLE_OF_MODULE)"
        out[TABLE_OF_MODULE[rel]] |= named
    return out


def granted_per_table(assembly: Assembly, stack: str, role: str) -> dict[str, set[str]]:
    """table -> DynamoDB actions the role's Allow statements grant on that table (and nothing else)."""
    tables = {
        r["Properties"]["TableName"]: lid
        for lid, r in resources(assembly.template(C.STATEFUL_STACK), "AWS::DynamoDB::Table").items()
    }
    lids = {"config": tables[C.CONFIG_TABLE_NAME], "results": tables[C.RESULTS_TABLE_NAME]}
    out: dict[str, set[str]] = {"config": set(), "results": set()}
    for st in _allowed(assembly.template(stack), role):
        acts = {a for a in _actions([st]) if a.startswith("dynamodb:")}
        if not acts:
            continue
        targets = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        for target in targets:
            text = json.dumps(target)
            (table,) = [t for t, lid in lids.items() if lid in text] or [None]
            assert table is not None, f"{role}: {sorted(acts)} on {text}, not one of the two tables"
            assert "/index" not in text and "*" not in text, f"{role}: {text} is wider than the table"
            out[table] |= acts
    return out


@pytest.mark.parametrize("who", ["planner", "front", "worker"])
def test_dynamodb_grants_per_table_match_the_code(assembly: Assembly, who: str) -> None:
    """Each role holds exactly its DynamoDB actions on each table; every action its code names on a
    table is granted on that table (or listed, with the code path that reaches it, in NOT_REACHED);
    and nothing is granted on a table that no module of its code works on with that action."""
    stack, role = _ROLE_OF[who]
    granted = granted_per_table(assembly, stack, role)
    assert granted == TABLE_GRANTS[who], {t: (sorted(granted[t] ^ TABLE_GRANTS[who][t])) for t in granted}
    called = called_per_table(ENTRY[who])
    for table in ("config", "results"):
        missing = called[table] - granted[table]
        assert missing == {a for t, a in NOT_REACHED[who] if t == table}, (
            f"{who} code names {sorted(missing)} on the {table} table without a grant there"
        )
        unused = granted[table] - called[table]
        assert not unused, f"{who} is granted {sorted(unused)} on the {table} table; no code calls it there"


def test_worker_roles_hold_the_same_table_grants(assembly: Assembly) -> None:
    doc = assembly.template(C.FLEET_STACK)
    roles = [lid for lid in resources(doc, "AWS::IAM::Role") if lid.startswith("Role")]
    assert len(roles) >= 3
    for lid in roles:
        assert granted_per_table(assembly, C.FLEET_STACK, lid) == TABLE_GRANTS["worker"], lid


def test_queues_are_created_with_tags() -> None:
    """Why the planner holds sqs:TagQueue."""
    assert "tags=" in (ROOT / "control" / "queues.py").read_text()


def test_worker_roles_are_alike_but_for_their_group(assembly: Assembly) -> None:
    doc = assembly.template(C.FLEET_STACK)
    groups = {
        g["Properties"]["AutoScalingGroupName"]
        for g in resources(doc, "AWS::AutoScaling::AutoScalingGroup").values()
    }
    roles = [lid for lid in resources(doc, "AWS::IAM::Role") if lid.startswith("Role")]
    assert len(roles) == len(groups)
    drained = set()
    for lid in roles:
        assert _actions(_allowed(doc, lid)) == WORKER_ACTIONS, lid
        (drain,) = [s for s in _allowed(doc, lid) if s.get("Sid") == "Lifecycle"]
        drained.add(drain["Resource"].rsplit("/", 1)[-1])  # each role completes its own group's hook
    assert drained == groups


def test_event_source_actions_only_on_the_fleet_events_queue(assembly: Assembly) -> None:
    """The planner receives and deletes on the fleet events queue (its event source) and, to move a
    superseded version's stranded messages (control/rehome.py), on the task queues only."""
    for st in _allowed(assembly.template(C.CONTROL_STACK), "PlannerRole"):
        acts = set(st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
        if acts & {"sqs:ReceiveMessage", "sqs:DeleteMessage"}:
            where = json.dumps(st["Resource"])
            assert "FleetEvents" in where or (
                st.get("Sid") == "StrandedMessages" and f":{C.QUEUE_NAME_PREFIX}*" in where
            ), st


def test_config_writes_are_limited_to_the_writers_keys() -> None:
    """The LeadingKeys patterns of the worker and front roles match the keys the code writes."""
    from control.registration.store import _INDEX, REPLAN_KEY
    from core.adapters.plan_store import _vkey

    worker_keys = [_vkey(7, "claim", "3"), "instance#i-0123456789abcdef0"]
    front_keys = [f"{_INDEX}traffic", REPLAN_KEY]
    for keys, patterns in ((worker_keys, C.WORKER_CONFIG_KEYS), (front_keys, C.FRONT_CONFIG_KEYS)):
        for k in keys:
            assert any(fnmatch.fnmatchcase(k, p) for p in patterns), (k, patterns)
    from core.adapters.slots import slot_key

    slot = slot_key("traffic", 7, "detector", 123)["pk"]["S"]
    assert all(any(fnmatch.fnmatchcase(slot, p) for p in C.FRONT_RESULTS_UPDATE_KEYS) for _ in (0,))
    # and never the pointer, a version document, an API key or the control state
    for k in (_vkey(7, "manifest"), _vkey(7, "fleet"), "plan#current", "apikey#x", "control#state"):
        assert not any(fnmatch.fnmatchcase(k, p) for p in C.WORKER_CONFIG_KEYS + C.FRONT_CONFIG_KEYS), k


def test_stack_queues_are_denied_to_roles_granted_the_prefix(assembly: Assembly) -> None:
    for stack in (C.CONTROL_STACK, C.FRONT_STACK, C.FLEET_STACK):
        doc = assembly.template(stack)
        for r in resources(doc, "AWS::IAM::Policy").values():
            sts = r["Properties"]["PolicyDocument"]["Statement"]
            prefixed = [
                s for s in sts if s["Effect"] == "Allow" and str(s["Resource"]).endswith(":skinflint-*")
            ]
            if not prefixed:
                continue
            denied = [s for s in sts if s["Effect"] == "Deny"]
            assert denied, stack
            arns = {a.rsplit(":", 1)[-1] for s in denied for a in s["Resource"]}
            assert arns == set(C.CDK_QUEUE_NAMES), (stack, arns)


def test_s3_and_prefix_names_match_the_code() -> None:
    from control.epoch import ControlConfig
    from control.registration.store import _S3_PREFIX
    from control.service import PROFILES_PREFIX

    assert C.PROFILES_PREFIX == PROFILES_PREFIX + "/"
    assert _S3_PREFIX.startswith(C.REGISTRY_PREFIX)
    assert ControlConfig().queue_prefix == C.QUEUE_NAME_PREFIX


# -- environment ---------------------------------------------------------------------------------------
def _functions(assembly: Assembly) -> dict[str, dict[str, Any]]:
    out = {}
    for stack in (C.FRONT_STACK, C.CONTROL_STACK):
        for fn in resources(assembly.template(stack), "AWS::Lambda::Function").values():
            out[fn["Properties"]["Handler"]] = fn["Properties"]
    return out


@pytest.mark.parametrize(("handler", "entry"), [(C.PLANNER_HANDLER, "planner"), (C.FRONT_HANDLER, "front")])
def test_every_variable_passed_is_read(assembly: Assembly, handler: str, entry: str) -> None:
    env = _functions(assembly)[handler]["Environment"]["Variables"]
    text = "\n".join(p.read_text() for p in closure(ENTRY[entry]))
    ours = [k for k in env if k.startswith("SKINFLINT_")]
    assert ours
    unread = [k for k in ours if f'"{k}"' not in text]
    assert not unread, f"{handler} is given variables its code never reads: {unread}"


def test_planner_environment(assembly: Assembly) -> None:
    from cdk.config import DeployConfig
    from control.epoch import ControlConfig

    fns = _functions(assembly)
    planner = fns[C.PLANNER_HANDLER]
    env = planner["Environment"]["Variables"]
    cfg = ControlConfig.from_env({k: v for k, v in env.items() if isinstance(v, str)})
    assert cfg.queue_workers == C.PLANNER_QUEUE_WORKERS
    assert cfg.epoch_s == C.PLANNER_EPOCH_S
    deployed = DeployConfig.from_context(CONTEXT.get).hardware
    assert cfg.asg_names == {h.name: h.asg_name for h in deployed}
    assert "SKINFLINT_TASKS_DLQ_ARN" in env
    assert planner["FunctionName"] == C.PLANNER_FUNCTION_NAME
    front_env = fns[C.FRONT_HANDLER]["Environment"]["Variables"]
    assert front_env["SKINFLINT_PLANNER_FUNCTION"] == C.PLANNER_FUNCTION_NAME
    assert float(front_env["SKINFLINT_RESULTS_RETENTION_DAYS"]) == C.RESULTS_RETENTION_DAYS
    from front.admission import AdmissionConfig

    assert AdmissionConfig.from_env(front_env).shared_slots  # several Lambda instances: shared counts
    (slots,) = [
        s for s in _allowed(assembly.template(C.FRONT_STACK), "FrontRole") if s.get("Sid") == "SlotCounts"
    ]
    assert slots["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"] == list(
        C.FRONT_RESULTS_UPDATE_KEYS
    )
    (invoke,) = [
        s
        for s in _allowed(assembly.template(C.FRONT_STACK), "FrontRole")
        if s["Action"] == "lambda:InvokeFunction"
    ]
    assert invoke["Resource"].endswith(f":function:{C.PLANNER_FUNCTION_NAME}")


def test_front_depends_on_control_and_not_back(assembly: Assembly) -> None:
    """The planner's name goes to the front by prop; nothing goes back (no cycle)."""
    artifacts = assembly.manifest()["artifacts"]
    assert C.CONTROL_STACK in artifacts[C.FRONT_STACK]["dependencies"]
    assert C.FRONT_STACK not in artifacts[C.CONTROL_STACK].get("dependencies", [])
    control = json.dumps(assembly.template(C.CONTROL_STACK))
    assert "Skinflint-Front" not in control


# -- packages ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("entry", "packages"),
    [("planner", C.LAMBDA_PACKAGES), ("front", C.LAMBDA_PACKAGES), ("worker", C.WORKER_PACKAGES)],
)
def test_shipped_packages_hold_every_imported_module(entry: str, packages: tuple[str, ...]) -> None:
    tops = {p.relative_to(ROOT).parts[0] for p in closure(ENTRY[entry])} & FIRST_PARTY
    assert tops <= set(packages), sorted(tops - set(packages))


def test_lambda_asset_carries_the_catalog(assembly: Assembly) -> None:
    fn = _functions(assembly)[C.PLANNER_HANDLER]
    key = fn["Code"]["S3Key"]
    asset = assembly.outdir / f"asset.{key.removesuffix('.zip')}"
    assert (asset / "profiles" / "hardware.json").is_file()
    assert (asset / "functions" / "planner.py").is_file()


# -- metrics -------------------------------------------------------------------------------------------
def _emitted() -> dict[str, str]:
    """metric name -> the source text of each ``.put("Name", ...)`` call (the Lambda and worker code)."""
    out: dict[str, str] = {}
    code = ("functions", "front", "control", "core", "workers")
    for path in [p for top in code for p in ROOT.joinpath(top).rglob("*.py")]:
        text = path.read_text()
        for m in re.finditer(r"\bput\(\s*\"([A-Za-z]+)\"(?=(.{0,160}))", text, re.S):
            out[m.group(1)] = out.get(m.group(1), "") + m.group(2)
    return out


def _observed_metrics(doc: dict[str, Any]) -> set[str]:
    text = json.dumps(doc["Resources"])
    ns = C.METRICS_NAMESPACE
    names = set(re.findall(r"\{" + ns + r",[A-Za-z,]+\} MetricName=\\+\"([A-Za-z]+)", text))
    names |= set(re.findall(r"SELECT [A-Z]+\(([A-Za-z]+)\) FROM SCHEMA\(" + ns, text))
    names |= set(re.findall(r"\[\\+\"" + ns + r"\\+\",\\+\"([A-Za-z]+)", text))
    for r in resources(doc, "AWS::CloudWatch::Alarm").values():
        if r["Properties"].get("Namespace") == ns:
            names.add(r["Properties"]["MetricName"])
    return names


def test_dashboard_and_alarms_read_metrics_the_code_emits(assembly: Assembly) -> None:
    doc = assembly.template(C.OBSERVABILITY_STACK)
    observed = _observed_metrics(doc)
    emitted = _emitted()
    # metrics CloudWatch Logs extracts with the fleet stack's metric filters (a failed boot's log line)
    for mf in resources(assembly.template(C.FLEET_STACK), "AWS::Logs::MetricFilter").values():
        for mt in mf["Properties"]["MetricTransformations"]:
            emitted[mt["MetricName"]] = mf["Properties"]["FilterPattern"]
    required = {
        C.SLO_ATTAINMENT_METRIC, C.INSTANCE_SECONDS_METRIC, C.PLANNING_FAILURES_METRIC, "BatchFill",
        "Drops", "FramesDropped", "FrontRejected", "EndToEndLatencyMs", "BilledCostPerHour",
        "SlotCounterErrors",
    }  # fmt: skip
    assert required <= observed, sorted(required - observed)
    assert observed <= set(emitted), f"read but never emitted: {sorted(observed - set(emitted))}"
    # the dimensions the widgets search on
    assert re.search(r"Hardware=.*State=", emitted[C.INSTANCE_SECONDS_METRIC], re.S)
    assert "App=" in emitted[C.SLO_ATTAINMENT_METRIC]
    assert "App=" not in emitted[C.PLANNING_FAILURES_METRIC].split(")")[0]  # the alarmed series has none


def test_alarms_cover_the_failure_modes(assembly: Assembly) -> None:
    alarms = resources(assembly.template(C.OBSERVABILITY_STACK), "AWS::CloudWatch::Alarm")
    by_metric = {a["Properties"].get("MetricName"): a["Properties"] for a in alarms.values()}
    planning = by_metric[C.PLANNING_FAILURES_METRIC]
    assert planning["TreatMissingData"] == "breaching"  # the planner stopped running
    assert (planning["DatapointsToAlarm"], planning["EvaluationPeriods"]) == (2, 3)
    carried = by_metric[C.CARRIED_APPS_METRIC]  # plans carried for half an hour: the budget is too small
    assert (carried["Statistic"], carried["Period"] * carried["EvaluationPeriods"]) == (
        "Minimum",
        C.CARRIED_ALARM_MINUTES * 60,
    )
    unmet = by_metric[C.SHED_TARGET_UNMET_METRIC]  # a shed target no reserve meets, for 15 minutes
    assert (unmet["Statistic"], unmet["Period"] * unmet["EvaluationPeriods"]) == (
        "Minimum",
        C.SHED_TARGET_ALARM_MINUTES * 60,
    )
    assert unmet["TreatMissingData"] == "notBreaching"
    text = json.dumps(alarms)
    assert "ORDER BY AVG() ASC LIMIT 1" in text  # the worst app's attainment, not the worst frame
    assert f"QueueName != '{C.TASKS_DLQ_NAME}'" in text
    # EMF lines CloudWatch Logs rejects, in the two log groups that carry metrics (front, instances)
    emf = [
        a["Properties"]
        for a in alarms.values()
        if "EMFValidationErrors" in json.dumps(a) and "EMFParsingErrors" in json.dumps(a)
    ]
    assert len(emf) == 1 and emf[0]["Threshold"] == 1
    groups = {
        json.dumps(q["MetricStat"]["Metric"]["Dimensions"])
        for q in emf[0]["Metrics"]
        if "MetricStat" in q and q["MetricStat"]["Metric"]["Namespace"] == "AWS/Logs"
    }
    assert len(groups) == 2 and any(C.WORKER_LOG_GROUP in g for g in groups)
    # the shared batch-slot counts out of reach: the front instances admit on their own counts
    (slots,) = [a["Properties"] for a in alarms.values() if "SUM(SlotCounterErrors)" in json.dumps(a)]
    assert (slots["Threshold"], slots["EvaluationPeriods"]) == (1, 2)
    assert slots["TreatMissingData"] == "notBreaching"
    # the front ran but its own count of it did not arrive: its metrics are lost, whatever the cause
    (missing,) = [
        a["Properties"] for a in alarms.values() if "front invocations its metrics miss" in json.dumps(a)
    ]
    expr = next(q["Expression"] for q in missing["Metrics"] if "Expression" in q)
    assert expr == "IF(ran >= 20 AND FILL(counted, 0) < 0.5 * ran, 1, 0)"
    counted = next(q for q in missing["Metrics"] if q["Id"] == "counted")["MetricStat"]["Metric"]
    assert counted["Namespace"] == C.METRICS_NAMESPACE and counted["MetricName"] == "AwsRequests"
    assert {d["Name"]: d["Value"] for d in counted["Dimensions"]} == {
        "Component": "front", "Service": "lambda", "Operation": "Invocation"  # core/adapters/usage.py
    }  # fmt: skip


# -- the instances ---------------------------------------------------------------------------------------
def user_data_text(fleet: dict[str, Any], hardware: str) -> str:
    """The boot script of ``hardware``'s launch template in the fleet template (tokens as ``<token>``)."""
    lts = resources(fleet, "AWS::EC2::LaunchTemplate")
    lt = next(lt for lt in lts.values() if f"SKINFLINT_HARDWARE={hardware}'" in json.dumps(lt))
    parts = lt["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else "<token>" for p in parts)


def _user_data(assembly: Assembly) -> str:
    return user_data_text(assembly.template(C.FLEET_STACK), "t4")


def test_user_data_starts_the_agent_with_its_environment(assembly: Assembly) -> None:
    ud = _user_data(assembly)
    env = dict(re.findall(r"echo '([A-Z_]+)=([^']*)' >> /etc/skinflint/worker.env", ud))
    assert env["SKINFLINT_HARDWARE"] == "t4"
    assert env["SKINFLINT_METRICS_NAMESPACE"] == C.METRICS_NAMESPACE
    assert env["SKINFLINT_DRAIN_HOOK"] == C.DRAIN_HOOK_NAME
    assert env["SKINFLINT_ASG_NAME"] == f"{C.ASG_NAME_PREFIX}t4"
    assert float(env["SKINFLINT_RESULTS_RETENTION_DAYS"]) == C.RESULTS_RETENTION_DAYS  # items' expiry
    # metrics as EMF lines in worker.log (no PutMetricData), one bucket a minute, and the log rotated
    assert env["SKINFLINT_METRICS_SINK"] == "emf"
    assert float(env["SKINFLINT_METRICS_RESOLUTION_S"]) == C.WORKER_METRICS_RESOLUTION_S
    assert '"file_path": "/var/log/skinflint/worker.log"' in ud
    rotate = ud.split("cat > /etc/logrotate.d/skinflint <<'ROT'\n", 1)[1].split("\nROT\n", 1)[0]
    assert rotate.startswith("/var/log/skinflint/worker.log {") and "copytruncate" in rotate
    assert f"maxsize {C.WORKER_LOG_MAX_MB}M" in rotate and "systemctl enable --now logrotate.timer" in ud
    for key in (
        "SKINFLINT_CONFIG_TABLE",
        "SKINFLINT_RESULTS_TABLE",
        "SKINFLINT_BUCKET",
        "AWS_DEFAULT_REGION",
    ):
        assert env[key], key
    text = "\n".join(p.read_text() for p in closure(ENTRY["worker"]))
    unread = [k for k in env if k.startswith("SKINFLINT_") and f'"{k}"' not in text and f"${{{k}}}" not in ud]
    assert not unread, f"neither the agent nor its unit reads {unread}"
    assert "systemctl enable --now skinflint-worker.service" in ud
    (exec_start,) = re.findall(r"ExecStart=(\S+) -m workers\.instance([^\n]*)", ud)
    from workers.instance import _parser

    argv = shlex.split(
        exec_start[1].replace("${SKINFLINT_HARDWARE}", "t4").replace("${SKINFLINT_INSTANCE_ID}", "i-0")
    )
    args = _parser().parse_args(argv)  # the flags the unit passes exist
    assert args.hardware == "t4"


def test_drain_fits_the_lifecycle_hook(assembly: Assembly) -> None:
    from workers.lifecycle import LifecycleWatcher

    hooks = resources(assembly.template(C.FLEET_STACK), "AWS::AutoScaling::LifecycleHook")
    drains = [h for h in hooks.values() if h["Properties"]["LifecycleHookName"] == C.DRAIN_HOOK_NAME]
    assert {h["Properties"]["HeartbeatTimeout"] for h in drains} == {C.DRAIN_HEARTBEAT_S}
    # the agent assumes the same deadline for a scale-in notice
    assert inspect.signature(LifecycleWatcher).parameters["hook_timeout_s"].default == C.DRAIN_HEARTBEAT_S
    (stop,) = re.findall(r"TimeoutStopSec=(\d+)", _user_data(assembly))
    assert int(stop) < C.DRAIN_HEARTBEAT_S  # systemd kills a stuck drain before the hook lets go


def test_spot_interruptions_reach_the_planner(assembly: Assembly) -> None:
    rules = resources(assembly.template(C.STATEFUL_STACK), "AWS::Events::Rule")
    (spot,) = [r for r in rules.values() if "Spot" in json.dumps(r["Properties"]["EventPattern"])]
    assert "FleetEvents" in json.dumps(spot["Properties"]["Targets"])
    from control.service import _instance_of

    sample = {"detail-type": "EC2 Spot Instance Interruption Warning", "detail": {"instance-id": "i-1"}}
    assert _instance_of(sample) == ("i-1", "EC2 Spot Instance Interruption Warning")
