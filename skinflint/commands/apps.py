"""``skinflint apps register|list|show|remove|admin-key``: the apps the control loop plans.

An app spec (YAML or JSON) is the app's DAG (modules with model names, edges with fan-out), its
``slo_s``, the frame ``rate`` to plan for until traffic is observed, and optionally ``min_rate``,
``hardware``, ``instance_types`` and inline ``profiles``. Registration checks all of it and lists
every problem; a valid spec is stored (S3 + DynamoDB) and the planner re-plans at its next epoch.

The commands talk to the deployment's table and bucket (``SKINFLINT_CONFIG_TABLE``,
``SKINFLINT_BUCKET``; AWS credentials from the environment), or to a local stack with
``--endpoint http://127.0.0.1:PORT`` (``skinflint up`` prints it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skinflint.errors import UsageError

if TYPE_CHECKING:
    import argparse

    from core.settings import DataPlaneConfig


def add_endpoint(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoint",
        default=None,
        metavar="URL",
        help="AWS endpoint (moto's server of a local stack); default: AWS (or $SKINFLINT_ENDPOINT_URL)",
    )


def data_config(endpoint: str | None) -> DataPlaneConfig:
    """The deployment's resource names from the environment; ``endpoint`` overrides the endpoint. A
    loopback endpoint (a local stack) gets the local stack's fake credentials when none are set."""
    # CLI start-up: loaded when this command runs
    from core.settings import DataPlaneConfig

    try:
        cfg = DataPlaneConfig.from_env()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if endpoint:
        cfg = dataclasses.replace(cfg, endpoint_url=endpoint)
    check_client_settings(cfg)
    if cfg.endpoint_url and cfg.endpoint_url.startswith(("http://127.0.0.1", "http://localhost")):
        # CLI start-up: loaded when this command runs
        from skinflint.local.stack import FAKE_CREDENTIALS

        for key, value in FAKE_CREDENTIALS.items():
            os.environ.setdefault(key, value)
    return cfg


def check_client_settings(cfg: DataPlaneConfig) -> None:
    """The region and endpoint the command's clients are made with, checked as botocore checks them
    when it makes a client: both come from the user (a flag or the environment), so a malformed one
    is a one-line usage error here, not a ``ValueError`` traceback from the first client."""
    # CLI start-up: loaded when this command runs
    from botocore.exceptions import InvalidRegionError
    from botocore.utils import is_valid_endpoint_url, is_valid_ipv6_endpoint_url, validate_region_name

    try:
        validate_region_name(cfg.region)
        region_ok = bool(cfg.region)  # "" passes, then makes the endpoint https://dynamodb..amazonaws.com
    except InvalidRegionError:
        region_ok = False
    if not region_ok:
        raise UsageError(f"{cfg.region!r} is not an AWS region name (e.g. us-east-1)")
    url = cfg.endpoint_url
    if url and not (is_valid_endpoint_url(url) or is_valid_ipv6_endpoint_url(url)):
        raise UsageError(f"{url!r} is not an endpoint URL (e.g. http://127.0.0.1:PORT)")


def aws_errors(what: str) -> Any:
    """Context manager: a failure of AWS (the adapters' ``DataPlaneError``; an error answer, no
    answer or no credentials: ``core.adapters._aws.AWS_ERRORS``) becomes a one-line usage
    error. A ``ParamValidationError`` is a request botocore refused before sending it: a bug of ours,
    or a malformed resource name in the deployment's settings (``SKINFLINT_BUCKET``, ...); not the
    command line's input (the region and endpoint are checked by :func:`check_client_settings`, the
    app names given become key values). It propagates, as it does from the adapters."""
    # CLI start-up: loaded when this command runs
    from core.adapters._aws import AWS_ERRORS
    from core.errors import DataPlaneError

    failures: tuple[type[Exception], ...] = (DataPlaneError, *AWS_ERRORS)

    @contextmanager
    def guard() -> Any:
        try:
            yield
        except failures as exc:
            raise UsageError(f"{what}: {str(exc).splitlines()[0]}") from None

    return guard()


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "apps", help="register and inspect the apps the control loop plans", description=__doc__
    )
    asub = parser.add_subparsers(dest="apps_command", metavar="ACTION")
    register_parser = asub.add_parser("register", help="validate an app spec (YAML/JSON) and register it")
    register_parser.add_argument("spec", type=Path, help="the app spec file (APP.yaml)")
    register_parser.add_argument("--dry-run", action="store_true", help="validate only; store nothing")
    register_parser.add_argument("--json", action="store_true", help="print the stored record as JSON")
    add_endpoint(register_parser)
    register_parser.set_defaults(func=run_register)
    ls = asub.add_parser("list", help="registered apps (revision, SLO, rate) and their planned state")
    ls.add_argument("--json", action="store_true")
    add_endpoint(ls)
    ls.set_defaults(func=run_list)
    sh = asub.add_parser("show", help="one registered app's spec")
    sh.add_argument("name")
    sh.add_argument("--json", action="store_true", help="the whole stored spec, profiles included")
    add_endpoint(sh)
    sh.set_defaults(func=run_show)
    rm = asub.add_parser("remove", help="unregister an app (the next epoch stops planning it)")
    rm.add_argument("name")
    add_endpoint(rm)
    rm.set_defaults(func=run_remove)
    ak = asub.add_parser("admin-key", help="create an admin key for POST /v1/apps (printed once)")
    ak.add_argument("--name", default="admin", help="a label stored with the key's digest")
    add_endpoint(ak)
    ak.set_defaults(func=run_admin_key)
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])


def _clients(cfg: DataPlaneConfig) -> tuple[Any, Any]:
    # CLI start-up: loaded when this command runs
    from core.clients import make_client

    return make_client("dynamodb", cfg), make_client("s3", cfg)


def _registrar(cfg: DataPlaneConfig) -> Any:
    """The registrar, checking feasibility with the planner's settings from the environment
    (``SKINFLINT_PLANNER_HEADROOM``, ``SKINFLINT_CHILD_HEADROOM``, ``SKINFLINT_HOP_OVERHEAD_S``), so a
    spec accepted here is one the epoch plans."""
    # CLI start-up: loaded when this command runs
    from control.registration.checks import planner_settings
    from control.service import Registrar, load_catalog, profile_store, registry_and_state
    from control.spec import profile_lookup

    ddb, s3 = _clients(cfg)
    registry, states = registry_and_state(ddb, s3, cfg.config_table, cfg.bucket)
    return Registrar(
        registry=registry,
        states=states,
        catalog=load_catalog(s3, cfg.bucket),
        stored_profile=profile_lookup(profile_store(s3, cfg.bucket, local=True)),
        **planner_settings(),
    )


def run_register(args: argparse.Namespace) -> int:
    # CLI start-up: loaded when this command runs
    from control.errors import RegistrationError
    from control.spec import parse_spec_text

    try:
        text = args.spec.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {args.spec}: {exc.strerror or exc}") from None
    cfg = data_config(args.endpoint)
    with aws_errors(f"cannot register {args.spec.name}"):
        registrar = _registrar(cfg)
        try:
            doc = parse_spec_text(text, str(args.spec))
            if args.dry_run:
                spec = registrar.validate(doc)
                out: dict[str, Any] = {"name": spec.name, "valid": True, "modules": list(spec.modules)}
            else:
                out = registrar.register(doc).model_dump()
        except RegistrationError as exc:
            raise UsageError(f"{args.spec}: {exc}") from None
    if args.json:
        print(json.dumps(out, indent=1))
    elif args.dry_run:
        print(f"{out['name']}: valid ({len(out['modules'])} modules); nothing stored (--dry-run)")
    else:
        print(
            f"registered {out['name']} revision {out['revision']} ({len(out['modules'])} modules, "
            f"{out['rate']:g} frames/s, SLO {out['slo_s']:g} s); the planner plans it at its next epoch"
        )
        if out.get("shed_target") is not None or out.get("admission_reserve"):
            print(f"  {_reserve_line(out)}")
    return 0


def _reserve_line(rec: dict[str, Any]) -> str:
    """What an app's admission reserve is, and why (a record's or a spec's fields)."""
    line = f"admission reserve {rec.get('admission_reserve') or 0:g} of the SLO (planned for the rest)"
    if rec.get("shed_target") is not None:
        line += f", chosen for shed_target {rec['shed_target']:g}"
        if rec.get("simulated_shed") is not None:
            line += (
                f": {100 * rec['simulated_shed']:.2f} % of Poisson frames shed at the registered rate "
                "in the simulator"
            )
    return line


def _reserve_in_force(cfg: DataPlaneConfig, record: Any) -> dict[str, Any] | None:
    """The admission reserve the control loop chose again for this revision of the app
    (control/reserves.py), if it did."""
    # CLI start-up: loaded when this command runs
    from control.state import StateStore
    from core.adapters.config_items import ConfigItems

    ddb, _ = _clients(cfg)
    choice = StateStore(ConfigItems(ddb, cfg.config_table)).load().reserves.get(record.name)
    if choice is None or choice.revision != record.revision:
        return None
    return choice.model_dump(include={"reserve", "rate", "shed", "met"})


def _planned(cfg: DataPlaneConfig) -> dict[str, Any]:
    """app -> (version, planned frame rate) from the plan in force."""
    # CLI start-up: loaded when this command runs
    from core.adapters.plan_store import PlanStore

    ddb, _ = _clients(cfg)
    cur = PlanStore(ddb, cfg.config_table).current()
    if cur is None:
        return {}
    return {app: {"version": cur.version, "frame_rate": entry.frame_rate} for app, entry in cur.apps.items()}


def run_list(args: argparse.Namespace) -> int:
    cfg = data_config(args.endpoint)
    with aws_errors("cannot list apps"):
        records = _registrar(cfg).registry.records()
        planned = _planned(cfg)
    rows = [record.model_dump() | {"planned": planned.get(record.name)} for record in records]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    # CLI start-up: loaded when this command runs
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"registered apps ({len(rows)})")
    for col in ("app", "revision", "modules", "SLO s", "rate", "planned", "version"):
        table.add_column(col, justify="left" if col in ("app", "modules") else "right")
    for row in rows:
        plan_entry = row["planned"] or {}
        table.add_row(
            row["name"], str(row["revision"]), ", ".join(row["modules"]),
            f"{row['slo_s']:g}", f"{row['rate']:g}",
            f"{plan_entry['frame_rate']:.2f}" if plan_entry else "not yet",
            str(plan_entry.get("version", "-")),
        )  # fmt: skip
    Console().print(table)
    return 0


def run_show(args: argparse.Namespace) -> int:
    cfg = data_config(args.endpoint)
    with aws_errors(f"cannot read app {args.name}"):
        got = _registrar(cfg).registry.get(args.name)
    if got is None:
        raise UsageError(f"no registered app named {args.name!r}")
    record, spec = got
    with aws_errors(f"cannot read the control state for {args.name}"):
        choice = _reserve_in_force(cfg, record)
    with aws_errors(f"cannot read the profile store for {args.name}"):
        sources = _profile_sources(cfg, spec)
    if args.json:
        doc = {
            "record": record.model_dump(),
            "spec": spec.model_dump(mode="json"),
            "profile_sources": sources,
        }
        print(json.dumps(doc | ({"reserve_in_force": choice} if choice else {}), indent=1))
        return 0
    print(f"{spec.name} revision {record.revision} (s3 key {record.s3_key}, sha256 {record.sha256[:12]}...)")
    print(f"  SLO {spec.slo_s:g} s, rate {spec.rate:g} frames/s, floor {spec.floor_rate:g} frames/s")
    print(f"  hardware: {', '.join(spec.hardware) if spec.hardware else 'any deployable class'}")
    if spec.shed_target is not None or spec.admission_reserve:
        print(f"  {_reserve_line(spec.model_dump())}")
    if choice:
        print(
            f"  in force: admission reserve {choice['reserve']:g}, chosen again by the control loop at "
            f"{choice['rate']:.4g} frames/s: {100 * choice['shed']:.2f} % shed in the simulator"
            + ("" if choice["met"] else ", shed_target not met")
        )
    for name, mod in spec.modules.items():
        hw = ", ".join(f"{h} ({source})" for h, source in sources.get(name, {}).items())
        print(f"  module {name}: model {mod.model} ({mod.kind}), profiled on {hw}")
    for src, dst, fan in spec.edges:
        print(f"  edge {src} -> {dst} (fan-out {fan:g})")
    return 0


def _profile_sources(cfg: DataPlaneConfig, spec: Any) -> dict[str, dict[str, str]]:
    """Module -> hardware class -> what the next epoch plans it from: the registered profile, or the
    entries an instance of the class measured (the shared profile store; control/epoch.py)."""
    # CLI start-up: loaded when this command runs
    from control.problems import prefer_measured
    from control.service import profile_store
    from profiles.errors import ProfilesError
    from profiles.onsite import profile_source, stored_entries

    _, s3 = _clients(cfg)
    lookup = stored_entries(profile_store(s3, cfg.bucket))
    stored: dict[str, list[dict[str, Any]]] = {}
    for model in spec.profiles:
        try:
            stored[model] = lookup(model)
        except ProfilesError as exc:  # an unreadable stored profile: the registered one is what plans
            print(f"profile store: {exc}", file=sys.stderr)
    profiles, _ = prefer_measured(spec.profiles, stored)
    out: dict[str, dict[str, str]] = {}
    for name, mod in spec.modules.items():
        entries = [{**e.model_dump(), **(e.model_extra or {})} for e in profiles.get(mod.model, [])]
        out[name] = {hw: profile_source(entries, hw) for hw in sorted({str(e["hardware"]) for e in entries})}
    return out


def run_remove(args: argparse.Namespace) -> int:
    cfg = data_config(args.endpoint)
    with aws_errors(f"cannot remove {args.name}"):
        registry = _registrar(cfg).registry
        if not registry.delete(args.name):
            raise UsageError(f"no registered app named {args.name!r}")
        registry.request_replan(args.name)
    print(f"unregistered {args.name}; the next epoch stops planning it and drains its queues")
    return 0


def run_admin_key(args: argparse.Namespace) -> int:
    # CLI start-up: loaded when this command runs
    from core.adapters.config_store import ConfigStore

    cfg = data_config(args.endpoint)
    key = "sk-admin-" + secrets.token_urlsafe(24)
    with aws_errors("cannot store the admin key"):
        ddb, _ = _clients(cfg)
        ConfigStore(ddb, cfg.config_table).put_admin_key(key, args.name)
    print(key)
    return 0
