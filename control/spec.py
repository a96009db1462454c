"""An app spec as the user writes it (APP.yaml or ``POST /v1/apps``): parse it, check every key,
listing every problem at once, and resolve every model's profile (inline, else the profile store),
so the stored spec is self-contained: a plan depends only on the registered spec and the catalog,
and changing a profile takes a new registration (a new revision).

An app spec is a :class:`planner.models.AppSpec` (modules with their model names, edges with
fan-out, ``slo_s``) plus ``rate`` (frames/s planned until traffic is observed), optionally
``min_rate`` (the floor the planner never plans below), ``hardware`` (classes the app may use),
``instance_types`` (a mapping for classes without an EC2 type: P100), ``profiles`` (inline
profile entries per model; a model without them must have a profile in the profile store) and
``admission_reserve`` (a fraction of the SLO in [0, 0.5), default 0: the app is planned for the SLO
times ``1 - admission_reserve``, and the rest is left for frames the front admits into a later window
than their arrival's when theirs is full; docs/dispatch.md, "Admission and the arrival process") or
``shed_target`` (a fraction of frames in (0, 0.5]: the registration chooses the smallest reserve of
:data:`control.registration.reserve.RESERVE_STEPS` whose plan sheds at most that many Poisson frames
at the registered rate in the simulator), and ``results`` (``pull``, the default: the results table
read by ``GET /v1/requests/{id}``; ``push``: the app's results queue, docs/dataplane.md).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from control.errors import ControlError, RegistrationError
from planner.models import AppModuleSpec, AppSpec, ProfileEntry, topological_order
from profiles.errors import ProfilesError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from planner.models import HardwareSpec

__all__ = [
    "KEYS",
    "MAX_ADMISSION_RESERVE",
    "RESULTS_SINKS",
    "NAME",
    "RegistrationSpec",
    "first_problem",
    "parse_spec",
    "parse_spec_text",
    "profile_lookup",
]

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,23}$")  # fits SQS queue names (80 chars) with room
KEYS = {
    "name",
    "description",
    "slo_s",
    "rate",
    "min_rate",
    "modules",
    "edges",
    "hardware",
    "instance_types",
    "profiles",
    "admission_reserve",
    "shed_target",
    "results",
}
#: where an app's results go (docs/dataplane.md, "Results: pull or push"): "pull", the results table
#: read by GET /v1/requests/{id} (the default); "push", the app's results queue a consumer reads
RESULTS_SINKS = ("pull", "push")
#: Largest ``admission_reserve`` (a fraction of the SLO): half the SLO left for spilled frames already
#: costs about 2x the plan (docs/dispatch.md), and more is better had with a longer SLO.
MAX_ADMISSION_RESERVE = 0.5


class RegistrationSpec(BaseModel):
    """A validated app spec, profiles resolved (what the registry stores and the planner reads)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str
    description: str = ""
    slo_s: float = Field(gt=0)
    rate: float = Field(gt=0)  # frames/s planned until traffic is observed
    min_rate: float | None = Field(default=None, gt=0)  # default: rate / 10
    modules: dict[str, AppModuleSpec]
    edges: list[tuple[str, str, float]] = Field(default_factory=list)
    hardware: list[str] | None = None
    instance_types: dict[str, str] = Field(default_factory=dict)
    profiles: dict[str, list[ProfileEntry]] = Field(default_factory=dict)
    # fraction of the SLO the plan leaves for frames admitted into a later window than their arrival's
    admission_reserve: float = Field(default=0.0, ge=0, lt=MAX_ADMISSION_RESERVE)
    # the fraction of Poisson frames the registration chose admission_reserve to shed at most
    shed_target: float | None = Field(default=None, gt=0, le=0.5)
    # what the chosen reserve's plan shed in the simulator at the registered rate
    simulated_shed: float | None = None
    results: Literal["pull", "push"] = "pull"  # RESULTS_SINKS

    def app_spec(self) -> AppSpec:
        return AppSpec(name=self.name, slo_s=self.slo_s, modules=self.modules, edges=self.edges)

    @property
    def planning_slo_s(self) -> float:
        """The SLO the app is planned for: ``slo_s`` less its ``admission_reserve``. Frames keep the
        whole SLO as their deadline (the front, the workers' early drop)."""
        return self.slo_s * (1.0 - self.admission_reserve)

    @property
    def floor_rate(self) -> float:
        return self.min_rate if self.min_rate is not None else self.rate / 10


def parse_spec_text(text: str | bytes, source: str = "spec") -> Any:
    """JSON or YAML text to a document; :class:`RegistrationError` when it is neither."""
    raw = text.decode() if isinstance(text, bytes) else text
    try:
        return json.loads(raw)
    except ValueError:
        pass
    try:
        import yaml  # optional dependency: PyYAML, for YAML specs
    except ImportError:  # PyYAML is in the Lambda layer; without it only JSON can be read
        raise RegistrationError([f"{source} is not valid JSON"]) from None
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "parse error"
        raise RegistrationError([f"{source} is neither JSON nor YAML ({first})"]) from exc


def _number(doc: Mapping[str, Any], key: str, problems: list[str], required: bool = True) -> float | None:
    value = doc.get(key)
    if value is None:
        if required:
            problems.append(f"{key} is required")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        problems.append(f"{key} must be a number, got {value!r}")
        return None
    if value <= 0:
        problems.append(f"{key} must be > 0, got {value}")
        return None
    return float(value)


def _reserve(doc: Mapping[str, Any], problems: list[str]) -> float:
    got = doc.get("admission_reserve", 0.0)
    if isinstance(got, bool) or not isinstance(got, int | float) or not 0 <= got < MAX_ADMISSION_RESERVE:
        problems.append(
            f"admission_reserve must be a fraction of the SLO in [0, {MAX_ADMISSION_RESERVE:g}), got {got!r}"
        )
        return 0.0
    return float(got)


def _shed_target(doc: Mapping[str, Any], problems: list[str]) -> float | None:
    value = doc.get("shed_target")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 0.5:
        problems.append(f"shed_target must be a fraction of frames in (0, 0.5], got {value!r}")
        return None
    if "admission_reserve" in doc:
        problems.append("give admission_reserve or shed_target, not both (shed_target chooses the reserve)")
        return None
    return float(value)


def _check_modules(doc: Mapping[str, Any], problems: list[str]) -> dict[str, AppModuleSpec]:
    mods = doc.get("modules")
    if not isinstance(mods, dict) or not mods:
        problems.append("modules must be a non-empty mapping of module name -> {model: ...}")
        return {}
    out: dict[str, AppModuleSpec] = {}
    for name, module in mods.items():
        if not isinstance(name, str) or not NAME.match(name):
            problems.append(f"module name {name!r} must be 1-24 letters, digits, '-' or '_'")
            continue
        if not isinstance(module, dict) or not isinstance(module.get("model"), str) or not module["model"]:
            problems.append(f"module {name!r} needs a model name (model: NAME)")
            continue
        try:
            out[name] = AppModuleSpec.model_validate(module)
        except ValidationError as exc:
            problems.append(f"module {name!r}: {first_problem(exc)}")
    return out


def _check_edges(
    doc: Mapping[str, Any], modules: Mapping[str, Any], problems: list[str]
) -> list[tuple[str, str, float]]:
    edges = doc.get("edges", [])
    if not isinstance(edges, list):
        problems.append("edges must be a list of [parent, child] or [parent, child, fan_out]")
        return []
    out: list[tuple[str, str, float]] = []
    ok = True
    for edge in edges:
        if (
            not isinstance(edge, list | tuple)
            or len(edge) not in (2, 3)
            or not all(isinstance(end, str) for end in edge[:2])
        ):
            problems.append(f"edge {edge!r} must be [parent, child] or [parent, child, fan_out]")
            ok = False
            continue
        src, dst = edge[0], edge[1]
        fan = edge[2] if len(edge) == 3 else 1.0
        unknown = [name for name in (src, dst) if name not in modules]
        if unknown:
            problems.append(f"edge [{src}, {dst}] names unknown module {', '.join(map(repr, unknown))}")
            ok = False
        if src == dst:
            problems.append(f"edge [{src}, {dst}] is a self-loop")
            ok = False
        if isinstance(fan, bool) or not isinstance(fan, int | float) or fan <= 0:
            problems.append(f"edge [{src}, {dst}] fan_out must be a number > 0, got {fan!r}")
            ok = False
        out.append((src, dst, float(fan) if isinstance(fan, int | float) else 1.0))
    if ok and modules:
        try:
            topological_order(list(modules), [(source, target) for source, target, _ in out])
        except ValueError as exc:
            problems.append(str(exc))
    return out


def _check_hardware(
    doc: Mapping[str, Any],
    catalog: Mapping[str, HardwareSpec],
    available: set[str] | None,
    problems: list[str],
) -> tuple[list[str] | None, dict[str, str]]:
    types = doc.get("instance_types") or {}
    if not isinstance(types, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in types.items()
    ):
        problems.append("instance_types must map hardware class -> EC2 instance type")
        types = {}
    for hw in types:
        if hw not in catalog:
            problems.append(
                f"instance_types names hardware {hw!r}, not in the catalog ({', '.join(catalog)})"
            )
    hw_list = doc.get("hardware")
    if hw_list is None:
        return None, dict(types)
    if not isinstance(hw_list, list) or not all(isinstance(name, str) for name in hw_list):
        problems.append("hardware must be a list of hardware class names")
        return None, dict(types)
    for name in hw_list:
        if name not in catalog:
            problems.append(f"hardware {name!r} is not in the catalog ({', '.join(catalog)})")
        elif not catalog[name].instance_type and not types.get(name):
            problems.append(
                f"hardware {name!r} has no EC2 instance type: map it with instance_types: {{{name}: TYPE}}"
            )
        elif available is not None and name not in available:
            problems.append(
                f"hardware {name!r} has no worker group in this deployment "
                f"(have: {', '.join(sorted(available))})"
            )
    return list(hw_list), dict(types)


def _check_profiles(
    doc: Mapping[str, Any], catalog: Mapping[str, HardwareSpec], problems: list[str]
) -> dict[str, list[ProfileEntry]]:
    raw = doc.get("profiles") or {}
    if not isinstance(raw, dict):
        problems.append("profiles must map a model name to a list of profile entries")
        return {}
    out: dict[str, list[ProfileEntry]] = {}
    for model, entries in raw.items():
        if not isinstance(entries, list) or not entries:
            problems.append(f"profiles.{model} must be a non-empty list of entries")
            continue
        good: list[ProfileEntry] = []
        for i, raw_entry in enumerate(entries):
            try:
                entry = ProfileEntry.model_validate(raw_entry)
            except ValidationError as exc:
                problems.append(f"profiles.{model}[{i}]: {first_problem(exc)}")
                continue
            if entry.hardware not in catalog:
                problems.append(f"profiles.{model}[{i}]: hardware {entry.hardware!r} is not in the catalog")
                continue
            good.append(entry)
        out[model] = good
    return out


def _resolve_models(
    modules: Mapping[str, AppModuleSpec],
    inline: Mapping[str, list[ProfileEntry]],
    stored: Callable[[str], list[ProfileEntry] | None],
    problems: list[str],
) -> dict[str, list[ProfileEntry]]:
    out: dict[str, list[ProfileEntry]] = {}
    for name, mod in modules.items():
        if mod.model in out:
            continue
        if mod.model in inline:
            out[mod.model] = list(inline[mod.model])
            continue
        try:
            entries = stored(mod.model)
        except ControlError as exc:
            problems.append(f"module {name!r}: cannot read the profile of model {mod.model!r} ({exc})")
            continue
        if entries is None:
            problems.append(
                f"module {name!r}: unknown model {mod.model!r} (no profile in the store and none inline)"
            )
            continue
        out[mod.model] = entries
    return out


def first_problem(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(part) for part in err.get("loc", ()))
    return f"{where}: {err.get('msg', '')}" if where else str(err.get("msg", ""))


def parse_spec(
    doc: Any,
    *,
    catalog: Mapping[str, HardwareSpec],
    stored_profile: Callable[[str], list[ProfileEntry] | None],
    available: Iterable[str] | None = None,
) -> RegistrationSpec:
    """Check an app spec document and return it with every model's profile resolved. Raises
    :class:`RegistrationError` listing every problem found (not only the first)."""
    if not isinstance(doc, dict):
        raise RegistrationError(["the spec must be a mapping (a YAML or JSON object)"])
    raw_name = doc.get("name")
    name = raw_name if isinstance(raw_name, str) else ""
    problems: list[str] = [
        f"unknown key {key!r} (known: {', '.join(sorted(KEYS))})" for key in doc if key not in KEYS
    ]
    if not NAME.match(name or ""):
        problems.append(
            f"name {doc.get('name')!r} must be 1-24 letters, digits, '-' or '_', starting alphanumeric"
        )
    slo = _number(doc, "slo_s", problems)
    rate = _number(doc, "rate", problems)
    min_rate = _number(doc, "min_rate", problems, required=False)
    reserve = _reserve(doc, problems)
    shed_target = _shed_target(doc, problems)
    results = doc.get("results", "pull")
    if results not in RESULTS_SINKS:
        problems.append(f"results must be one of {', '.join(RESULTS_SINKS)}, got {results!r}")
        results = "pull"
    if rate is not None and min_rate is not None and min_rate > rate:
        problems.append(f"min_rate {min_rate:g} is above rate {rate:g}")
    avail = set(available) if available is not None else None
    modules = _check_modules(doc, problems)
    edges = _check_edges(doc, modules, problems)
    hardware, types = _check_hardware(doc, catalog, avail, problems)
    inline = _check_profiles(doc, catalog, problems)
    profiles = _resolve_models(modules, inline, stored_profile, problems)
    if problems:
        raise RegistrationError(problems, name)
    return RegistrationSpec(
        name=name,
        description=str(doc.get("description", "")),
        slo_s=slo,
        rate=rate,
        min_rate=min_rate,
        modules=modules,
        edges=edges,
        hardware=hardware,
        instance_types=types,
        profiles=profiles,
        admission_reserve=reserve,
        shed_target=shed_target,
        results=results,
    )


def profile_lookup(store: Any) -> Callable[[str], list[ProfileEntry] | None]:
    """``model -> entries | None`` over a :class:`profiles.store.ProfileStore` (None: no profile)."""
    known: set[str] | None = None

    def lookup(model: str) -> list[ProfileEntry] | None:
        nonlocal known
        try:
            if known is None:
                known = set(store.list_models())
            if model not in known:
                return None
            return list(store.load_profile(model))
        except ProfilesError as exc:
            raise ControlError(str(exc)) from exc

    return lookup
