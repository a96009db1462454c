"""``skinflint deploy check``: the pre-flight to run before ``cdk deploy``.

One line per check, for the deployment that ``cdk.json`` and the ``-c KEY=VALUE`` options describe
(the same context ``python app.py`` reads): the account and region, the CDK bootstrap (the
``CDKToolkit`` stack and its version parameter), the Service Quotas the fleet's instance families and
the functions' reserved concurrency draw on, the AMI parameters the launch templates resolve, the
GPU AMI's support of each GPU class, the workers' wheelhouses and the Lambda layer built, the models
built, and the age of the prices the planner costs with. Exits 1 naming the blockers; warnings do
not block. ``--endpoint URL`` points every client at another endpoint (moto's server);
``--json`` for programs.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from skinflint.errors import UsageError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator, Mapping

    from cdk.config import DeployConfig

__all__ = ["Check", "register", "run", "run_checks"]

OK, WARN, FAIL = "ok", "warn", "FAIL"
# CDK's synthesized templates refuse a bootstrap older than this (the CheckBootstrapVersion rule of
# every stack: BootstrapVersion not in 1..5)
MIN_BOOTSTRAP_VERSION = 6
BOOTSTRAP_STACK = "CDKToolkit"
BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"  # the default qualifier's
LAMBDA_UNRESERVED_MIN = 10  # Lambda keeps at least 10 concurrent executions unreserved per region
PRICE_MAX_AGE_DAYS = 365  # prices older than this are flagged (a judgement: AWS revises list prices)


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | FAIL
    detail: str


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "deploy", help="pre-flight checks before cdk deploy", description=__doc__.splitlines()[0]
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    check = verbs.add_parser(
        "check", help="account, bootstrap, quotas, AMIs, built assets", description=__doc__
    )
    check.add_argument("--endpoint", default=None, metavar="URL", help="AWS endpoint (moto's server)")
    check.add_argument("--json", action="store_true", help="print JSON instead of lines")
    check.add_argument(
        "-c",
        "--context",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="CDK context, as given to cdk deploy (over cdk.json)",
    )
    check.set_defaults(func=run)


def _context(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"-c expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out


def _boto_factory(region: str, endpoint: str | None) -> Callable[[str], Any]:
    # CLI start-up: loaded when this command runs
    import boto3
    from botocore.config import Config

    config = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=10)

    def make(service: str) -> Any:
        return boto3.client(service, region_name=region, endpoint_url=endpoint, config=config)

    return make


def run(args: argparse.Namespace) -> int:
    # CLI start-up: loaded when this command runs
    from cdk.app import cdk_json_context
    from cdk.config import MODELS_NONE, DeployConfig, InfraConfigError

    ctx = {**cdk_json_context(), **_context(args.context)}
    if args.endpoint and not re.match(r"^https?://", args.endpoint):
        raise UsageError(f"{args.endpoint!r} is not an endpoint URL (e.g. http://127.0.0.1:5000)")
    try:  # the models are a check of their own: load everything else without them
        config = DeployConfig.from_context({**ctx, "models": MODELS_NONE}.get)
    except InfraConfigError as exc:
        raise UsageError(f"deploy check: {exc}") from None
    checks = run_checks(config, ctx.get("models"), _boto_factory(config.region, args.endpoint))
    if args.json:
        blockers = [c.name for c in checks if c.status == FAIL]
        print(
            json.dumps(
                {"ok": not blockers, "blockers": blockers, "checks": [asdict(c) for c in checks]}, indent=2
            )
        )
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            print(f"{c.status:<4}  {c.name:<{width}}  {c.detail}")
    blocked = [c.name for c in checks if c.status == FAIL]
    if blocked:
        if not args.json:
            print(f"blocked: {', '.join(blocked)}")
        return 1
    return 0


def run_checks(
    config: DeployConfig,
    models: Any,
    client: Callable[[str], Any],
    now: dt.datetime | None = None,
) -> list[Check]:
    """Every check, in order; ``client(service)`` makes an AWS client (injected: moto, fakes)."""
    now = now or dt.datetime.now(dt.UTC)
    out: list[Check] = []
    for step in (_account, _bootstrap, _quotas, _amis):
        try:
            out.extend(step(config, client))
        except Exception as exc:  # noqa: BLE001 - any AWS failure is this check's result, one line
            out.append(Check(step.__name__.strip("_"), FAIL, _one_line(exc)))
    out.extend(_gpu_support(config))
    out.extend(_assets(config, models))
    out.extend(_prices(config, now))
    return out


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


# -- AWS --------------------------------------------------------------------------------------------
def _account(config: DeployConfig, client: Callable[[str], Any]) -> Iterator[Check]:
    who = client("sts").get_caller_identity()
    account = str(who.get("Account", ""))
    if account != config.account:
        yield Check(
            "account",
            FAIL,
            f"credentials are for account {account}, the context deploys to {config.account} (-c account=)",
        )
    else:
        yield Check("account", OK, f"{account} ({who.get('Arn', '?')}), region {config.region}")


def _bootstrap(config: DeployConfig, client: Callable[[str], Any]) -> Iterator[Check]:
    where = f"aws://{config.account}/{config.region}"
    try:
        stacks = client("cloudformation").describe_stacks(StackName=BOOTSTRAP_STACK)["Stacks"]
    except Exception as exc:
        if "does not exist" in str(exc):
            yield Check("bootstrap", FAIL, f"no {BOOTSTRAP_STACK} stack: run `cdk bootstrap {where}`")
            return
        raise
    status = str(stacks[0].get("StackStatus", "?")) if stacks else "?"
    if not status.endswith("_COMPLETE") or "ROLLBACK" in status or "DELETE" in status:
        yield Check("bootstrap", FAIL, f"{BOOTSTRAP_STACK} is {status}: re-run `cdk bootstrap {where}`")
        return
    try:
        param = client("ssm").get_parameter(Name=BOOTSTRAP_VERSION_PARAMETER)["Parameter"]["Value"]
        version = int(param)
    except Exception as exc:  # noqa: BLE001 - ParameterNotFound, a non-number: both block
        yield Check(
            "bootstrap", FAIL, f"{BOOTSTRAP_VERSION_PARAMETER} unreadable ({_one_line(exc)}): re-bootstrap"
        )
        return
    if version < MIN_BOOTSTRAP_VERSION:
        yield Check(
            "bootstrap", FAIL, f"version {version} < {MIN_BOOTSTRAP_VERSION}: run `cdk bootstrap {where}`"
        )
    else:
        yield Check("bootstrap", OK, f"{BOOTSTRAP_STACK} {status}, version {version}")


def _quota_value(client: Callable[[str], Any], service: str, code: str) -> tuple[float, str]:
    """The account's applied quota, else AWS's default for it (Service Quotas has no applied value
    until one is requested), and which it is."""
    quotas = client("service-quotas")
    try:
        return float(
            quotas.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"]
        ), "applied"
    except Exception as exc:
        if _error_code(exc) != "NoSuchResourceException":
            raise
    got = quotas.get_aws_default_service_quota(ServiceCode=service, QuotaCode=code)
    return float(got["Quota"]["Value"]), "AWS default"


def _quotas(config: DeployConfig, client: Callable[[str], Any]) -> Iterator[Check]:
    # CLI start-up: loaded when this command runs
    from cdk import constants as C
    from cdk.config import load_catalog
    from cdk.limits import QUOTAS, quota_for

    catalog = load_catalog()
    need: dict[str, tuple[int, int, list[str]]] = {}  # code -> (vCPUs at max, one instance's, classes)
    for hw in config.hardware:
        vcpus = int(catalog.get(hw.name, {}).get("vcpus") or 0)
        code = quota_for(hw.instance_type, config.spot).code
        top = config.max_instances.get(hw.name, C.ASG_MAX_INSTANCES)
        at_max, one, names = need.get(code, (0, 0, []))
        need[code] = (at_max + top * vcpus, max(one, vcpus), [*names, hw.name])
    by_code = {q.code: q for q in QUOTAS.values()}
    for code, (at_max, one, names) in sorted(need.items()):
        quota = by_code[code]
        value, source = _quota_value(client, quota.service, code)
        what = f"{quota.name} ({code}): {value:g} vCPUs ({source}) for {', '.join(names)}"
        if value < one:
            yield Check(f"quota {code}", FAIL, f"{what}: not one instance can launch; request >= {at_max}")
        elif value < at_max:
            yield Check(f"quota {code}", WARN, f"{what}: the groups' maxima need {at_max}; request more")
        else:
            yield Check(f"quota {code}", OK, f"{what} >= {at_max} at the groups' maxima")
    lam = QUOTAS["lambda"]
    value, source = _quota_value(client, lam.service, lam.code)
    reserved = (config.front_concurrency or 0) + (config.planner_concurrency or 0)
    what = f"Lambda {lam.name} ({lam.code}): {value:g} ({source}), reserved {reserved}"
    if reserved and value - reserved < LAMBDA_UNRESERVED_MIN:
        yield Check(
            "quota lambda",
            FAIL,
            f"{what}: Lambda keeps {LAMBDA_UNRESERVED_MIN} unreserved, so request >= "
            f"{reserved + LAMBDA_UNRESERVED_MIN} or lower -c front_concurrency / planner_concurrency",
        )
    else:
        yield Check("quota lambda", OK, what)


def _amis(config: DeployConfig, client: Callable[[str], Any]) -> Iterator[Check]:
    # CLI start-up: loaded when this command runs
    from cdk import constants as C

    kinds = {hw.kind for hw in config.hardware}
    params = [(kind, C.GPU_AMI_PARAMETER if kind == "gpu" else C.CPU_AMI_PARAMETER) for kind in sorted(kinds)]
    ssm = client("ssm")
    for kind, name in params:
        try:
            value = ssm.get_parameter(Name=name)["Parameter"]["Value"]
        except Exception as exc:  # noqa: BLE001 - not found, or not readable: the launch template fails
            yield Check(f"ami {kind}", FAIL, f"{name}: {_one_line(exc)}")
            continue
        yield Check(f"ami {kind}", OK, f"{name} -> {value}")


# -- local ------------------------------------------------------------------------------------------
def _gpu_support(config: DeployConfig) -> Iterator[Check]:
    # CLI start-up: loaded when this command runs
    from cdk import constants as C

    for hw in config.hardware:
        if hw.kind != "gpu":
            continue
        family = hw.instance_type.split(".", maxsplit=1)[0]
        if family in C.GPU_AMI_UNSUPPORTED_FAMILIES:
            keep = ",".join(h.name for h in config.hardware if h.name != hw.name)
            yield Check(
                f"gpu {hw.name}",
                FAIL,
                f"{hw.instance_type}: the GPU AMI's open NVIDIA driver does not drive this GPU; every "
                f"instance would fail its boot check: drop it (-c hardware={keep}) or map the class to a "
                f"Turing or later type (-c {hw.name}_instance_type=...)",
            )
        else:
            yield Check(f"gpu {hw.name}", OK, f"{hw.instance_type}: driven by the GPU AMI, CUDA 12 runtime")


def _assets(config: DeployConfig, models: Any) -> Iterator[Check]:
    # CLI start-up: loaded when this command runs
    from cdk import constants as C
    from cdk.config import InfraConfigError, models_dir
    from cdk.deps import read_manifest

    for kind in sorted({hw.kind for hw in config.hardware}):
        manifest = read_manifest(kind, config.wheels_dir)
        if manifest is None:
            yield Check(
                f"wheelhouse {kind}",
                FAIL,
                f"{config.wheels_dir / kind} is not built for CPython {C.WORKER_PYTHON}: run "
                "`python -m cdk.deps worker` (or make worker-deps)",
            )
        else:
            wheels = manifest.get("wheels")
            count = len(wheels) if isinstance(wheels, list) else 0
            yield Check(f"wheelhouse {kind}", OK, f"{count} wheels, built {manifest.get('built_at', '?')}")
    if (C.LAMBDA_DEPS_DIR / "python").is_dir():
        yield Check("lambda layer", OK, str(C.LAMBDA_DEPS_DIR / "python"))
    else:
        yield Check(
            "lambda layer", FAIL, f"{C.LAMBDA_DEPS_DIR}/python is missing: run `python -m cdk.deps lambda`"
        )
    try:
        found = models_dir(models)
    except InfraConfigError as exc:
        yield Check("models", FAIL, str(exc))
        return
    if found is None:
        yield Check("models", WARN, "none shipped (-c models=none): every share runs emulated")
    else:
        count = len(list(found.glob(f"*{C.MODEL_SUFFIX}")))
        yield Check("models", OK, f"{count} models in {found}")


def _prices(config: DeployConfig, now: dt.datetime) -> Iterator[Check]:
    # CLI start-up: loaded when this command runs
    from cdk import constants as C
    from cdk.config import load_catalog

    catalog = load_catalog()
    dates = {hw.name: str(catalog.get(hw.name, {}).get("price_date") or "") for hw in config.hardware}
    prices_path = C.REPO_ROOT / "profiles" / "aws_prices.json"
    try:
        dates["data plane"] = str(json.loads(prices_path.read_text()).get("as_of") or "")
    except (OSError, ValueError):
        dates["data plane"] = ""
    oldest = _oldest(dates)
    if oldest is None:
        yield Check("prices", WARN, "undated prices in profiles/hardware.json or profiles/aws_prices.json")
        return
    name, when = oldest
    age = (now.date() - when).days
    detail = f"oldest: {name} as of {when:%Y-%m} ({age} days; profiles/hardware.json, aws_prices.json)"
    yield Check("prices", WARN if age > PRICE_MAX_AGE_DAYS else OK, detail)


def _oldest(dates: Mapping[str, str]) -> tuple[str, dt.date] | None:
    parsed: list[tuple[dt.date, str]] = []
    for name, text in dates.items():
        match = re.fullmatch(r"(\d{4})-(\d{2})(?:-(\d{2}))?", text)
        if match is None:
            return None
        parsed.append((dt.date(int(match[1]), int(match[2]), int(match[3] or 1)), name))
    if not parsed:
        return None
    when, name = min(parsed)
    return name, when
