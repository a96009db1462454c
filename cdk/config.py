"""Deployment settings from CDK context, validated against the hardware catalog before any construct
is built (so a bad ``-c`` value fails synthesis with one line, fast).

Context keys (``-c key=value`` or ``cdk.json``):

- ``account``, ``region``: the target environment (``cdk.json`` pins an offline default).
- ``hardware``: comma-separated catalog classes, one Auto Scaling group each. ``cpu`` stands for
  every CPU class of the catalog. Default: every class that has an EC2 instance type.
- ``instance_types``: ``class:type,class:type`` (e.g. ``p100:g4dn.2xlarge``); or one key per class,
  ``<class>_instance_type`` (e.g. ``-c p100_instance_type=g4dn.2xlarge``).
- ``spot``: ``true|false`` (default false): Spot capacity with capacity rebalancing.
- ``front_concurrency``, ``planner_concurrency``: reserved concurrency of the front and planner
  functions (default: none reserved; a new account's regional limit of 10 leaves nothing to reserve,
  since Lambda keeps 10 unreserved).
- Limits sized for a peak (``skinflint plan APP --rate R --json`` prints them as ``cdk_context``):
  ``max_instances`` (``class:N,class:N``: each Auto Scaling group's MaxSize, default
  ``C.ASG_MAX_INSTANCES``), ``api_rate`` and ``api_burst`` (requests/s and requests, the stage's and
  the usage plan's throttle), ``api_quota`` (requests per key per day), ``waf_rate`` (requests per
  client IP per 5 minutes).
- ``front_api``: ``http`` (default) or ``rest``. ``http``: an API Gateway HTTP API (no WAF: HTTP
  APIs cannot have a web ACL), the front's own key check, stage throttle ``api_rate``/``api_burst``.
  ``rest``: the REST API with an API key, a usage plan (``api_quota``) and a WAF web ACL
  (``waf_rate``); those two keys are read but unused under ``http``.
- ``worker_wheels``: the root of the workers' wheelhouses (default ``build/worker-wheels``, which
  ``python -m cdk.deps worker`` fills: one directory per hardware kind).
- ``powertools_layer_version``: version of the public Powertools layer.
- ``alarm_email``: optional address subscribed to the alarm topic.
- ``models``: the directory of ONNX models shipped to the instances (default: the build cache of
  ``skinflint models build``, ``$SKINFLINT_CACHE/models`` or ``~/.cache/skinflint/models``); it must
  hold at least one ``<model>.onnx``. ``none`` deploys without models: every share runs emulated.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdk import constants as C
from profiles.store import cache_dir

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "CONTEXT_KEYS",
    "DeployConfig",
    "HardwareClass",
    "MODELS_NONE",
    "InfraConfigError",
    "load_catalog",
    "models_dir",
    "validate_instance_type",
]

# family.size: p3.2xlarge, g4dn.xlarge, c6i.large, u-6tb1.metal
_ITYPE = re.compile(
    r"^(?P<prefix>[a-z]+(?:-[a-z0-9]+)?)(?P<gen>\d+)(?P<attrs>[a-z-]*)\.(?P<size>[a-z0-9-]+)$"
)
_GPU_PREFIXES = ("p", "g")  # NVIDIA GPU families (p2-p5, g3-g6); g4ad is AMD (rejected below)
# Context keys the app reads (plus "<class>_instance_type" for every catalog class).
CONTEXT_KEYS = (
    "account", "region", "hardware", "instance_types", "spot", "front_concurrency",
    "planner_concurrency", "powertools_layer_version", "alarm_email", "models", "max_instances",
    "api_rate", "api_burst", "api_quota", "waf_rate", "worker_wheels", "front_api",
)  # fmt: skip
# WAF's rate-based rule accepts 10 .. 2,000,000,000 requests per window (AWS WAF API reference,
# RateBasedStatement.Limit)
WAF_RATE_BOUNDS = (10, 2_000_000_000)
MODELS_NONE = "none"  # -c models=none: no models shipped, every share runs emulated
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class InfraConfigError(ValueError):
    """A context value the app cannot deploy; the message is one line for the user."""


@dataclass(frozen=True)
class HardwareClass:
    """One catalog class, resolved to the EC2 instance type its Auto Scaling group launches."""

    name: str
    kind: str  # "gpu" | "cpu"
    instance_type: str
    price_per_hour: float  # USD/h, from the catalog (the dashboard's cost figure)

    @property
    def slug(self) -> str:
        """The class name usable in resource names and construct ids (``c6i.large`` -> ``c6i-large``)."""
        return re.sub(r"[^A-Za-z0-9-]", "-", self.name)

    @property
    def asg_name(self) -> str:
        return f"{C.ASG_NAME_PREFIX}{self.slug}"


@dataclass(frozen=True)
class DeployConfig:
    account: str
    region: str
    hardware: tuple[HardwareClass, ...]
    spot: bool = False
    front_concurrency: int | None = None  # reserved concurrent executions; None: unreserved
    planner_concurrency: int | None = None
    max_instances: Mapping[str, int] = field(default_factory=dict)  # class -> ASG MaxSize
    api_rate: int = C.API_RATE_LIMIT_RPS
    api_burst: int = C.API_BURST
    api_quota: int = C.API_QUOTA_PER_DAY
    waf_rate: int = C.WAF_RATE_LIMIT_PER_5MIN
    front_api: str = C.FRONT_API_HTTP  # C.FRONT_APIS: which API Gateway API fronts the function
    wheels_dir: Path = C.WORKER_WHEELS_DIR  # <kind>/ wheelhouses (python -m cdk.deps worker)
    powertools_layer_version: int = C.POWERTOOLS_LAYER_VERSION
    alarm_email: str | None = None
    models_dir: Path | None = None  # ONNX models shipped to the instances; None: -c models=none

    @classmethod
    def from_context(
        cls, get: Callable[[str], Any], catalog: Mapping[str, Mapping[str, Any]] | None = None
    ) -> DeployConfig:
        """``get(key)`` returns a context value or None (``app.node.try_get_context``)."""
        cat = load_catalog() if catalog is None else catalog
        account = str(get("account") or "")
        region = str(get("region") or "")
        if not re.fullmatch(r"\d{12}", account):
            raise InfraConfigError(f"context 'account' must be a 12-digit AWS account id, got {account!r}")
        if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", region):
            raise InfraConfigError(
                f"context 'region' must be an AWS region such as us-east-1, got {region!r}"
            )
        names = _hardware_names(get("hardware"), cat)
        mapping = _instance_type_mapping(get, cat)
        classes = tuple(_resolve(name, cat[name], mapping.get(name)) for name in names)
        return cls(
            account=account,
            region=region,
            hardware=classes,
            spot=_flag(get("spot"), "spot", default=False),
            front_concurrency=_optional_int(get("front_concurrency"), "front_concurrency"),
            planner_concurrency=_optional_int(get("planner_concurrency"), "planner_concurrency"),
            max_instances=_max_instances(get("max_instances"), names),
            api_rate=_positive_int(get("api_rate"), "api_rate", C.API_RATE_LIMIT_RPS),
            api_burst=_positive_int(get("api_burst"), "api_burst", C.API_BURST),
            api_quota=_positive_int(get("api_quota"), "api_quota", C.API_QUOTA_PER_DAY),
            waf_rate=_bounded(
                _positive_int(get("waf_rate"), "waf_rate", C.WAF_RATE_LIMIT_PER_5MIN),
                "waf_rate",
                WAF_RATE_BOUNDS,
            ),
            front_api=_choice(get("front_api"), "front_api", C.FRONT_APIS),
            powertools_layer_version=_positive_int(
                get("powertools_layer_version"), "powertools_layer_version", C.POWERTOOLS_LAYER_VERSION
            ),
            alarm_email=str(get("alarm_email")) if get("alarm_email") else None,
            models_dir=models_dir(get("models")),
            wheels_dir=Path(str(get("worker_wheels"))).expanduser()
            if get("worker_wheels")
            else C.WORKER_WHEELS_DIR,
        )


def models_dir(value: Any) -> Path | None:
    """The directory whose ``*.onnx`` files ship to the instances, or None for ``-c models=none``.

    Default: where ``skinflint models build`` writes them. Synthesis never builds them (that takes
    minutes of CPU): a directory without models stops it with one line saying what to run."""
    text = "" if value is None else str(value).strip()
    if text.lower() == MODELS_NONE:
        return None
    if text:
        path = Path(text).expanduser()
    else:
        path = cache_dir() / "models"
    if text and path.exists() and not path.is_dir():
        raise InfraConfigError(f"-c models={text}: {path} is not a directory of <model>.onnx files")
    if not path.is_dir() or not any(path.glob(f"*{C.MODEL_SUFFIX}")):
        raise InfraConfigError(
            f"no built models in {path}: run `skinflint models build` first "
            f"(or pass -c models=DIR, or -c models={MODELS_NONE} to deploy without models: "
            "every share then runs emulated)"
        )
    return path


def load_catalog(path: Path = C.CATALOG_PATH) -> dict[str, dict[str, Any]]:
    """The catalog's ``hardware`` object (read as JSON: the CDK app does not import ``profiles``)."""
    try:
        doc = json.loads(path.read_text())
        hardware = doc["hardware"]
    except (OSError, ValueError, KeyError) as exc:
        raise InfraConfigError(f"cannot read the hardware catalog {path}: {exc}") from exc
    if not isinstance(hardware, dict) or not hardware:
        raise InfraConfigError(f"the hardware catalog {path} lists no hardware")
    return hardware


def _split(value: Any) -> list[str]:
    if value is None:
        return []
    items = value if isinstance(value, list) else str(value).split(",")
    return [str(item).strip() for item in items if str(item).strip()]


def _hardware_names(value: Any, cat: Mapping[str, Mapping[str, Any]]) -> list[str]:
    requested = _split(value)
    if not requested:  # default: every class EC2 can run as catalogued
        return [name for name, spec in cat.items() if spec.get("instance_type")]
    out: list[str] = []
    for name in requested:
        if name in cat:
            expanded = [name]
        elif name == "cpu":  # the catalog lists CPU sizes; "cpu" means all of them
            expanded = [name for name, spec in cat.items() if spec.get("kind") == "cpu"]
        else:
            raise InfraConfigError(
                f"unknown hardware {name!r} in -c hardware: the catalog has {', '.join(cat)} "
                "(or 'cpu' for all CPU classes)"
            )
        out.extend(name for name in expanded if name not in out)
    return out


def _instance_type_mapping(get: Callable[[str], Any], cat: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for pair in _split(get("instance_types")):
        name, sep, itype = pair.partition(":")
        if not sep or not name.strip() or not itype.strip():
            raise InfraConfigError(f"-c instance_types expects class:type pairs, got {pair!r}")
        mapping[name.strip()] = itype.strip()
    for name in cat:
        single = get(f"{name}_instance_type")
        if single:
            mapping[name] = str(single).strip()
    unknown = sorted(set(mapping) - set(cat))
    if unknown:
        raise InfraConfigError(
            f"instance type given for unknown hardware {', '.join(unknown)}: the catalog has {', '.join(cat)}"
        )
    return mapping


def validate_instance_type(hardware: str, kind: str, itype: str) -> str:
    """Check that ``itype`` is an x86_64 EC2 instance type of the right kind (CDK accepts any string)."""
    match = _ITYPE.match(itype)
    if match is None:
        raise InfraConfigError(
            f"{hardware}: {itype!r} is not an EC2 instance type (expected family.size, e.g. g4dn.xlarge)"
        )
    prefix, attrs = match["prefix"], match["attrs"]
    if "g" in attrs:  # c7g, g5g, m6gd: Graviton (arm64); the AMIs here are x86_64
        raise InfraConfigError(f"{hardware}: {itype} is an arm64 (Graviton) type; the worker AMIs are x86_64")
    is_gpu = prefix in _GPU_PREFIXES and "a" not in attrs  # g4ad: AMD GPU, no CUDA
    if kind == "gpu" and not is_gpu:
        raise InfraConfigError(
            f"{hardware} is a GPU class but {itype} has no NVIDIA GPU (use a p* or g* family)"
        )
    if kind == "cpu" and prefix in _GPU_PREFIXES:
        raise InfraConfigError(
            f"{hardware} is a CPU class but {itype} is a GPU type (it would bill GPU prices)"
        )
    return itype


def _resolve(name: str, spec: Mapping[str, Any], override: str | None) -> HardwareClass:
    kind = str(spec.get("kind") or "")
    if kind not in ("gpu", "cpu"):
        raise InfraConfigError(f"catalog class {name!r} has kind {kind!r}; expected gpu or cpu")
    itype = override or spec.get("instance_type")
    if not itype:
        raise InfraConfigError(
            f"hardware {name} has no EC2 instance type (AWS has never offered it): "
            f"pass -c {name}_instance_type=TYPE (or -c instance_types={name}:TYPE) "
            "or drop it from -c hardware"
        )
    return HardwareClass(
        name=name,
        kind=kind,
        instance_type=validate_instance_type(name, kind, str(itype)),
        price_per_hour=float(spec.get("price_per_hour") or 0.0),
    )


def _flag(value: Any, key: str, default: bool) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InfraConfigError(f"-c {key} must be true or false, got {value!r}")


def _positive_int(value: Any, key: str, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        number = int(str(value))
    except ValueError:
        raise InfraConfigError(f"-c {key} must be a positive integer, got {value!r}") from None
    if number <= 0:
        raise InfraConfigError(f"-c {key} must be a positive integer, got {value!r}")
    return number


def _choice(value: Any, key: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (case-insensitive); the first when unset."""
    if value is None or str(value).strip() == "":
        return choices[0]
    text = str(value).strip().lower()
    if text not in choices:
        raise InfraConfigError(f"-c {key} must be one of {', '.join(choices)}, got {value!r}")
    return text


def _optional_int(value: Any, key: str) -> int | None:
    """A positive integer, or None when unset (``none`` too)."""
    if value is None or value == "" or str(value).strip().lower() == "none":
        return None
    return _positive_int(value, key, 0)


def _bounded(number: int, key: str, bounds: tuple[int, int]) -> int:
    low, high = bounds
    if not low <= number <= high:
        raise InfraConfigError(f"-c {key} must be within [{low:,}, {high:,}], got {number:,}")
    return number


def _max_instances(value: Any, names: list[str]) -> dict[str, int]:
    """``class:N,class:N`` -> {class: N}; every class named must be deployed (``-c hardware``)."""
    out: dict[str, int] = {}
    for pair in _split(value):
        name, sep, count = pair.partition(":")
        name = name.strip()
        if not sep or not name:
            raise InfraConfigError(f"-c max_instances expects class:count pairs, got {pair!r}")
        if name not in names:
            raise InfraConfigError(
                f"-c max_instances names {name}, which is not deployed (-c hardware: {', '.join(names)})"
            )
        out[name] = _positive_int(count.strip(), f"max_instances {name}", 0)
    return out
