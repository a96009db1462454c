"""App registration: validate an app spec (APP.yaml or ``POST /v1/apps``), listing every problem at
once, and store it: the spec file in S3, an index item in the config table.

An app spec is a :class:`planner.models.AppSpec` (modules with their model names, edges with
fan-out, ``slo_s``) plus ``rate`` (frames/s planned until traffic is observed), optionally
``min_rate`` (the floor the planner never plans below), ``hardware`` (classes the app may use),
``instance_types`` (a mapping for classes without an EC2 type: P100), ``profiles`` (inline
profile entries per model; a model without them must have a profile in the profile store) and
``admission_reserve`` (a fraction of the SLO in [0, 0.5), default 0: the app is planned for the SLO
times ``1 - admission_reserve``, and the rest is left for frames the front admits into a later window
than their arrival's when theirs is full; docs/dispatch.md, "Admission and the arrival process") or
``shed_target`` (a fraction of frames in (0, 0.5]: the registration chooses the smallest reserve of
:data:`RESERVE_STEPS` whose plan sheds at most that many Poisson frames at the registered rate in the
simulator, :func:`choose_admission_reserve`).

The stored spec is self-contained: every model's profile is resolved at registration (inline, else
the store) and written into it, so a plan depends only on the registered spec and the catalog, and
changing a profile takes a new registration (a new revision).

The feasibility check solves the app as its first epoch will (same problem, rate and solve); that plan
is stored with the revision as its *seed* (``registry/apps/<name>/r<revision>.seed.json``), and the first
epoch that plans the app for the same problem takes it instead of solving again
(:func:`planner.fleet.plan_fleet`'s ``seeds``): registering 100 apps costs their solves once, at
registration, not again in one epoch.

Keys: ``appspec#<name>`` (:class:`AppRecord`, conditional on the revision read), S3
``registry/apps/<name>/r<revision>.json`` (and ``.seed.json``); ``control#replan`` asks the planner to
run (it also runs on its schedule).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from control.errors import ControlError, RegistrationConflict, RegistrationError
from core.adapters._aws import AWS_ERRORS, error_code
from planner.models import AppModuleSpec, AppSpec, Plan, ProfileEntry, topological_order

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from control.epoch import ControlConfig
    from planner.models import HardwareSpec

__all__ = [
    "AppRecord",
    "AppRegistry",
    "Registration",
    "RegistrationSpec",
    "check_plannable",
    "ReserveSearch",
    "choose_admission_reserve",
    "search_admission_reserve",
    "first_plan_rate",
    "parse_spec_text",
    "pick_reserve",
    "planner_settings",
    "profile_lookup",
    "simulated_shed",
    "validate_registration",
    "validate_spec",
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
}
#: Largest ``admission_reserve`` (a fraction of the SLO): half the SLO left for spilled frames already
#: costs about 2x the plan (docs/dispatch.md), and more is better had with a longer SLO.
MAX_ADMISSION_RESERVE = 0.5
#: The reserves a ``shed_target`` chooses from, smallest (cheapest) first.
RESERVE_STEPS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4)
#: Poisson frames the ``shed_target`` simulation offers at least (over at least SHED_SIM_MIN_S and at
#: most SHED_SIM_MAX_S simulated seconds): 2,000 frames put a 1 % shed rate within about +-0.5 %.
SHED_SIM_FRAMES = 2000
SHED_SIM_MIN_S, SHED_SIM_MAX_S = 10.0, 600.0
REPLAN_KEY = "control#replan"
_T = TypeVar("_T")
_INDEX = "appspec#"
_S3_PREFIX = "registry/apps/"


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


class AppRecord(BaseModel):
    """The index item of a registered app."""

    name: str
    revision: int
    sha256: str
    s3_key: str
    registered_at: float
    slo_s: float
    rate: float
    modules: list[str]
    seed_key: str | None = None  # S3 key of the plan the registration's feasibility check solved
    seed_sha256: str | None = None
    admission_reserve: float = 0.0  # fraction of the SLO planned for spilled frames (given or chosen)
    shed_target: float | None = None  # what the reserve was chosen for, if it was
    simulated_shed: float | None = None  # what the chosen reserve's plan shed in the simulator


@dataclass(frozen=True)
class Registration:
    """A validated spec and the plan its feasibility check solved (``planner.fleet.seed_plan``; None
    when feasibility was not checked)."""

    spec: RegistrationSpec
    seed: Plan | None = None


# -- validation ----------------------------------------------------------------------------------


def parse_spec_text(text: str | bytes, source: str = "spec") -> Any:
    """JSON or YAML text to a document; :class:`RegistrationError` when it is neither."""
    raw = text.decode() if isinstance(text, bytes) else text
    try:
        return json.loads(raw)
    except ValueError:
        pass
    try:
        import yaml
    except ImportError:  # PyYAML is in the Lambda layer; without it only JSON can be read
        raise RegistrationError([f"{source} is not valid JSON"]) from None
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "parse error"
        raise RegistrationError([f"{source} is neither JSON nor YAML ({first})"]) from exc


def _number(doc: Mapping[str, Any], key: str, problems: list[str], required: bool = True) -> float | None:
    v = doc.get(key)
    if v is None:
        if required:
            problems.append(f"{key} is required")
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        problems.append(f"{key} must be a number, got {v!r}")
        return None
    if v <= 0:
        problems.append(f"{key} must be > 0, got {v}")
        return None
    return float(v)


def _reserve(doc: Mapping[str, Any], problems: list[str]) -> float:
    v = doc.get("admission_reserve", 0.0)
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < MAX_ADMISSION_RESERVE:
        problems.append(
            f"admission_reserve must be a fraction of the SLO in [0, {MAX_ADMISSION_RESERVE:g}), got {v!r}"
        )
        return 0.0
    return float(v)


def _shed_target(doc: Mapping[str, Any], problems: list[str]) -> float | None:
    v = doc.get("shed_target")
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 0.5:
        problems.append(f"shed_target must be a fraction of frames in (0, 0.5], got {v!r}")
        return None
    if "admission_reserve" in doc:
        problems.append("give admission_reserve or shed_target, not both (shed_target chooses the reserve)")
        return None
    return float(v)


def _check_modules(doc: Mapping[str, Any], problems: list[str]) -> dict[str, AppModuleSpec]:
    mods = doc.get("modules")
    if not isinstance(mods, dict) or not mods:
        problems.append("modules must be a non-empty mapping of module name -> {model: ...}")
        return {}
    out: dict[str, AppModuleSpec] = {}
    for name, m in mods.items():
        if not isinstance(name, str) or not NAME.match(name):
            problems.append(f"module name {name!r} must be 1-24 letters, digits, '-' or '_'")
            continue
        if not isinstance(m, dict) or not isinstance(m.get("model"), str) or not m["model"]:
            problems.append(f"module {name!r} needs a model name (model: NAME)")
            continue
        try:
            out[name] = AppModuleSpec.model_validate(m)
        except ValidationError as exc:
            problems.append(f"module {name!r}: {_first(exc)}")
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
    for e in edges:
        if (
            not isinstance(e, list | tuple)
            or len(e) not in (2, 3)
            or not all(isinstance(x, str) for x in e[:2])
        ):
            problems.append(f"edge {e!r} must be [parent, child] or [parent, child, fan_out]")
            ok = False
            continue
        src, dst = e[0], e[1]
        fan = e[2] if len(e) == 3 else 1.0
        unknown = [x for x in (src, dst) if x not in modules]
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
            topological_order(list(modules), [(s, d) for s, d, _ in out])
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
        isinstance(k, str) and isinstance(v, str) for k, v in types.items()
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
    if not isinstance(hw_list, list) or not all(isinstance(h, str) for h in hw_list):
        problems.append("hardware must be a list of hardware class names")
        return None, dict(types)
    for h in hw_list:
        if h not in catalog:
            problems.append(f"hardware {h!r} is not in the catalog ({', '.join(catalog)})")
        elif not catalog[h].instance_type and not types.get(h):
            problems.append(
                f"hardware {h!r} has no EC2 instance type: map it with instance_types: {{{h}: TYPE}}"
            )
        elif available is not None and h not in available:
            problems.append(
                f"hardware {h!r} has no worker group in this deployment "
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
        for i, e in enumerate(entries):
            try:
                entry = ProfileEntry.model_validate(e)
            except ValidationError as exc:
                problems.append(f"profiles.{model}[{i}]: {_first(exc)}")
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


def _first(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    return f"{where}: {err.get('msg', '')}" if where else str(err.get("msg", ""))


def validate_spec(doc: Any, **settings: Any) -> RegistrationSpec:
    """:func:`validate_registration`'s spec (the same keyword arguments)."""
    return validate_registration(doc, **settings).spec


def validate_registration(
    doc: Any,
    *,
    catalog: Mapping[str, HardwareSpec],
    stored_profile: Callable[[str], list[ProfileEntry] | None],
    available: Iterable[str] | None = None,
    check_feasible: bool = True,
    overhead_s: float = 0.0,
    headroom: float = 0.0,
    child_headroom: float = 0.0,
    policy: str = "skinflint",
) -> Registration:
    """Check an app spec document and return it with every model's profile resolved, and the plan of
    the feasibility check. Raises :class:`RegistrationError` listing every problem found (not only the
    first). Feasibility is checked as the first epoch will plan the app (:func:`check_plannable`): at
    its registered rate plus ``headroom`` (quantised as the forecast does), with the dispatch-aware
    solve."""
    if not isinstance(doc, dict):
        raise RegistrationError(["the spec must be a mapping (a YAML or JSON object)"])
    raw_name = doc.get("name")
    name = raw_name if isinstance(raw_name, str) else ""
    problems: list[str] = [
        f"unknown key {k!r} (known: {', '.join(sorted(KEYS))})" for k in doc if k not in KEYS
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
    spec = RegistrationSpec(
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
    )
    _check_hardware_profiles(spec, catalog, avail)
    if not check_feasible:
        return Registration(spec)
    settings = {"overhead_s": overhead_s, "headroom": headroom, "child_headroom": child_headroom}
    if shed_target is not None:
        spec, seed = choose_admission_reserve(spec, catalog, avail, policy=policy, **settings)
        return Registration(spec, seed)
    seed = check_plannable(spec, catalog, avail, policy=policy, **settings)
    return Registration(spec, seed)


def planner_settings(control: ControlConfig | None = None) -> dict[str, Any]:
    """The planner settings a registration's feasibility check shares with the epoch, as keyword
    arguments of ``control.service.Registrar`` (and :func:`validate_spec`): the hop
    overhead, the forecast headroom, the child headroom and the solver policy. Read through
    :meth:`ControlConfig.from_env` (``SKINFLINT_HOP_OVERHEAD_S``, ``SKINFLINT_PLANNER_HEADROOM``,
    ``SKINFLINT_CHILD_HEADROOM``), the same parser the planner uses, unless ``control`` is given;
    a bad value raises ``ControlError`` as it does in the planner."""
    if control is None:
        from control.epoch import ControlConfig

        control = ControlConfig.from_env()
    return {
        "overhead_s": control.hop_overhead_s,
        "headroom": control.headroom,
        "child_headroom": control.child_headroom,
        "policy": control.policy,
    }


def floor_plan_rate(spec: RegistrationSpec, headroom: float) -> float:
    """The least frame rate an app is planned for: its floor (``min_rate``) through the forecast, with
    the same ``headroom`` as any observed rate. A floor is a rate the app can always send at; planned
    at exactly that rate, its windows would have no spare room, and frames of independent cameras
    arriving in one window would be shed (``slot_full``) at the floor itself."""
    from planner.scaling import forecast_rate

    return forecast_rate([spec.floor_rate], headroom=headroom)


def first_plan_rate(spec: RegistrationSpec, headroom: float) -> float:
    """The frame rate the first epoch plans a new app for: its registered rate through the forecast
    (``headroom``, quantised up), never below its floor's (:func:`floor_plan_rate`;
    control/epoch.py)."""
    from planner.scaling import forecast_rate

    return max(forecast_rate([spec.rate], headroom=headroom), floor_plan_rate(spec, headroom))


def check_plannable(
    spec: RegistrationSpec,
    catalog: Mapping[str, HardwareSpec],
    available: Iterable[str] | None,
    *,
    overhead_s: float,
    headroom: float = 0.0,
    child_headroom: float = 0.0,
    policy: str = "skinflint",
) -> Plan:
    """Raise :class:`RegistrationError` unless the epoch can plan ``spec``: the same problem
    (``app_problem``) at the same rate (:func:`first_plan_rate`) with the same solve
    (``planner.robust.solve_dispatchable``, billed objective) the epoch uses, so an app accepted
    here is not one the planner then reports as failed. Returns that plan as a seed
    (``planner.fleet.seed_plan``: it records the problem's digest, so an epoch takes it only for the
    same problem)."""
    from control.problems import app_problem
    from planner.errors import PlannerError
    from planner.fleet import seed_plan
    from planner.robust import solve_dispatchable

    rate = first_plan_rate(spec, headroom)
    try:
        problem = app_problem(spec, rate, catalog, available, overhead_s)
        plan = solve_dispatchable(problem, policy=policy, objective="billed", child_headroom=child_headroom)
    except (PlannerError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RegistrationError(
            [
                f"cannot be planned at {spec.rate:g} frames/s within slo_s {spec.slo_s:g}"
                + (
                    f" less its admission_reserve ({spec.planning_slo_s:.4g} s)"
                    if spec.admission_reserve > 0
                    else ""
                )
                + f": {first} "
                f"(checked as the planner plans it: {rate:.4g} frames/s with headroom, dispatch-aware)"
            ],
            spec.name,
        ) from exc
    return seed_plan(problem, plan, policy)


def simulated_shed(
    spec: RegistrationSpec,
    plan: Plan,
    catalog: Mapping[str, HardwareSpec],
    available: Iterable[str] | None,
    overhead_s: float,
) -> float:
    """The fraction of Poisson frames at ``spec``'s registered rate that the front's admission sheds
    with ``plan`` in the simulator (``planner.simulator.simulate``, ``admission="planned"``): frames
    keep the whole SLO as their deadline, the plan is what the epoch runs. Enough simulated time for
    :data:`SHED_SIM_FRAMES` frames (within the bounds), one fixed seed: the same answer every time."""
    from control.problems import app_problem
    from planner.simulator import simulate

    full = spec.model_copy(update={"admission_reserve": 0.0})
    problem = app_problem(full, spec.rate, catalog, available, overhead_s)
    duration = min(max(SHED_SIM_FRAMES / spec.rate, SHED_SIM_MIN_S), SHED_SIM_MAX_S)
    report = simulate(problem, plan, duration, "poisson", seed=0, admission="planned")
    return report.frames_shed / report.frames_offered if report.frames_offered else 0.0


@dataclass(frozen=True)
class ReserveSearch:
    """What :func:`search_admission_reserve` found: the reserve to plan with, what its plan shed in
    the simulator, that plan, and whether it met the spec's ``shed_target`` (when not: the reserve of
    least shed among the steps tried)."""

    reserve: float
    shed: float
    plan: Plan
    met: bool


def search_admission_reserve(
    spec: RegistrationSpec,
    catalog: Mapping[str, HardwareSpec],
    available: Iterable[str] | None,
    *,
    overhead_s: float,
    headroom: float = 0.0,
    child_headroom: float = 0.0,
    policy: str = "skinflint",
) -> ReserveSearch:
    """The smallest ``admission_reserve`` of :data:`RESERVE_STEPS` whose plan (the feasibility
    check's, :func:`check_plannable`) sheds at most ``spec.shed_target`` of Poisson frames at
    ``spec.rate`` (:func:`simulated_shed`). A larger reserve costs more (the app is planned for less of
    its SLO), so the first that meets the target is the cheapest of the steps. When none does, the one
    of least shed (``met`` false). Raises :class:`RegistrationError` only when the app cannot be
    planned within its whole SLO; the steps past the first that does not plan are not tried."""
    target = spec.shed_target
    if target is None:
        raise ValueError("search_admission_reserve needs a spec with a shed_target")
    settings = {"overhead_s": overhead_s, "headroom": headroom, "child_headroom": child_headroom}

    def evaluate(reserve: float) -> tuple[float, Plan] | None:
        candidate = spec.model_copy(update={"admission_reserve": reserve})
        try:
            seed = check_plannable(candidate, catalog, available, policy=policy, **settings)
        except RegistrationError:
            if reserve == 0.0:
                raise  # not plannable within its whole SLO: the plain feasibility error
            return None  # less of the SLO does not plan either
        return simulated_shed(candidate, seed, catalog, available, overhead_s), seed

    found = pick_reserve(evaluate, target)
    assert found is not None  # reserve 0 either plans or raises
    reserve, shed, plan, met = found
    return ReserveSearch(reserve, shed, plan, met)


def pick_reserve(
    evaluate: Callable[[float], tuple[float, _T] | None], target: float
) -> tuple[float, float, _T, bool] | None:
    """The reserve search's rule, wherever a reserve is chosen (the registration, the control loop's
    review, ``bench/simulator.py --reserve-study``): over :data:`RESERVE_STEPS`, smallest first,
    ``evaluate(reserve)`` gives (shed, what was planned), or None when that reserve cannot be planned
    (nor any larger one: the search stops). Returns (reserve, shed, planned, met): the first whose shed
    is at most ``target``, else the one of least shed (``met`` false); None when none plans."""
    best: tuple[float, float, _T, bool] | None = None
    for reserve in RESERVE_STEPS:
        got = evaluate(reserve)
        if got is None:
            break
        shed, planned = got
        if shed <= target:
            return reserve, shed, planned, True
        if best is None or shed < best[1]:
            best = (reserve, shed, planned, False)
    return best


def choose_admission_reserve(
    spec: RegistrationSpec,
    catalog: Mapping[str, HardwareSpec],
    available: Iterable[str] | None,
    *,
    overhead_s: float,
    headroom: float = 0.0,
    child_headroom: float = 0.0,
    policy: str = "skinflint",
) -> tuple[RegistrationSpec, Plan]:
    """``spec`` with the reserve :func:`search_admission_reserve` finds, with that plan as the seed.
    Raises :class:`RegistrationError` when the app cannot be planned at all, or when no step meets the
    target (naming the least shed found)."""
    found = search_admission_reserve(
        spec,
        catalog,
        available,
        overhead_s=overhead_s,
        headroom=headroom,
        child_headroom=child_headroom,
        policy=policy,
    )
    if found.met:
        return spec.model_copy(
            update={"admission_reserve": found.reserve, "simulated_shed": found.shed}
        ), found.plan
    raise RegistrationError(
        [
            f"shed_target {spec.shed_target:g} cannot be met: the least shed found was {found.shed:.3g} of "
            f"Poisson frames at {spec.rate:g} frames/s (admission_reserve {found.reserve:g}), up to "
            f"reserve {RESERVE_STEPS[-1]:g} of the SLO: a longer SLO or a larger target"
        ],
        spec.name,
    )


def _check_hardware_profiles(
    spec: RegistrationSpec, catalog: Mapping[str, HardwareSpec], available: set[str] | None
) -> None:
    from control.problems import usable_hardware

    hw = usable_hardware(spec, catalog, available)
    problems: list[str] = []
    for name, mod in spec.modules.items():
        have = sorted({e.hardware for e in spec.profiles.get(mod.model, [])})
        if not set(have) & set(hw):
            problems.append(
                f"module {name!r} (model {mod.model}) has no profile on the usable hardware "
                f"({', '.join(hw) or 'none'}), profiled on: {', '.join(have) or 'nothing'}"
            )
    if problems:
        raise RegistrationError(problems, spec.name)


# -- storage ---------------------------------------------------------------------------------------


class AppRegistry:
    """Registered apps: spec files in S3, an index in the config table. Clients are injected."""

    def __init__(self, ddb: Any, table: str, s3: Any, bucket: str):
        self._ddb = ddb
        self._table = table
        self._s3 = s3
        self._bucket = bucket

    def put(self, spec: RegistrationSpec, now: float | None = None, seed: Plan | None = None) -> AppRecord:
        """Store a validated spec as the app's next revision (conditional on the revision read:
        :class:`ControlError` when another registration of the same app won), with ``seed``, the plan
        its feasibility check solved (:class:`Registration`), when given."""
        old = self.record(spec.name)
        revision = (old.revision if old else 0) + 1
        body = spec.model_dump_json(indent=1).encode()
        key = f"{_S3_PREFIX}{spec.name}/r{revision}.json"
        seed_key = seed_sha = None
        if seed is not None:
            seed_body = seed.model_dump_json().encode()
            seed_key, seed_sha = (
                f"{_S3_PREFIX}{spec.name}/r{revision}.seed.json",
                hashlib.sha256(seed_body).hexdigest(),
            )
            self._write(seed_key, seed_body)
        record = AppRecord(
            name=spec.name,
            revision=revision,
            sha256=hashlib.sha256(body).hexdigest(),
            s3_key=key,
            registered_at=time.time() if now is None else now,
            slo_s=spec.slo_s,
            rate=spec.rate,
            modules=list(spec.modules),
            seed_key=seed_key,
            seed_sha256=seed_sha,
            admission_reserve=spec.admission_reserve,
            shed_target=spec.shed_target,
            simulated_shed=spec.simulated_shed,
        )
        self._write(key, body)
        cond: dict[str, Any] = (
            {"ConditionExpression": "attribute_not_exists(pk)"}
            if old is None
            else {
                "ConditionExpression": "revision = :r",
                "ExpressionAttributeValues": {":r": {"N": str(old.revision)}},
            }
        )
        item = {
            "pk": {"S": _INDEX + spec.name},
            "revision": {"N": str(revision)},
            "doc": {"S": record.model_dump_json()},
        }
        try:
            self._ddb.put_item(TableName=self._table, Item=item, **cond)
        except AWS_ERRORS as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                why = f"app {spec.name!r} was registered concurrently; try again"
                raise RegistrationConflict(why) from exc
            raise ControlError(f"cannot index app {spec.name!r}: {exc}") from exc
        return record

    def _write(self, key: str, body: bytes) -> None:
        try:
            self._s3.put_object(Bucket=self._bucket, Key=key, Body=body, ContentType="application/json")
        except AWS_ERRORS as exc:
            raise ControlError(f"cannot write s3://{self._bucket}/{key}: {exc}") from exc

    def _read(self, key: str, sha256: str) -> bytes:
        try:
            body: bytes = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        except AWS_ERRORS as exc:
            raise ControlError(f"cannot read s3://{self._bucket}/{key}: {exc}") from exc
        if hashlib.sha256(body).hexdigest() != sha256:
            raise ControlError(f"s3://{self._bucket}/{key} does not match its index (checksum)")
        return body

    def record(self, name: str) -> AppRecord | None:
        try:
            item = self._ddb.get_item(
                TableName=self._table, Key={"pk": {"S": _INDEX + name}}, ConsistentRead=True
            ).get("Item")
        except AWS_ERRORS as exc:
            raise ControlError(f"cannot read app {name!r}: {exc}") from exc
        return AppRecord.model_validate_json(item["doc"]["S"]) if item else None

    def records(self) -> list[AppRecord]:
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "FilterExpression": "begins_with(pk, :p)",
            "ExpressionAttributeValues": {":p": {"S": _INDEX}},
            "ConsistentRead": True,
        }
        out: list[AppRecord] = []
        try:
            while True:
                page = self._ddb.scan(**kwargs)
                out += [AppRecord.model_validate_json(i["doc"]["S"]) for i in page.get("Items", [])]
                if "LastEvaluatedKey" not in page:
                    return sorted(out, key=lambda r: r.name)
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        except AWS_ERRORS as exc:
            raise ControlError(f"cannot list registered apps: {exc}") from exc

    def spec(self, record: AppRecord) -> RegistrationSpec:
        return RegistrationSpec.model_validate_json(self._read(record.s3_key, record.sha256))

    def seed(self, record: AppRecord) -> Plan | None:
        """The plan the revision's registration solved (None: stored without one). Raises
        :class:`ControlError` when it cannot be read or does not match its index."""
        if record.seed_key is None or record.seed_sha256 is None:
            return None
        body = self._read(record.seed_key, record.seed_sha256)
        try:
            return Plan.model_validate_json(body)
        except ValidationError as exc:
            raise ControlError(f"s3://{self._bucket}/{record.seed_key} is not a plan: {_first(exc)}") from exc

    def get(self, name: str) -> tuple[AppRecord, RegistrationSpec] | None:
        rec = self.record(name)
        return (rec, self.spec(rec)) if rec else None

    def load_all(self) -> dict[str, tuple[AppRecord, RegistrationSpec]]:
        return {r.name: (r, self.spec(r)) for r in self.records()}

    def delete(self, name: str) -> bool:
        """Unregister an app (the planner drops it at its next epoch); False when unknown."""
        rec = self.record(name)
        if rec is None:
            return False
        try:
            self._ddb.delete_item(TableName=self._table, Key={"pk": {"S": _INDEX + name}})
        except AWS_ERRORS as exc:
            raise ControlError(f"cannot unregister {name!r}: {exc}") from exc
        return True

    # -- planning requests ---------------------------------------------------------------------
    def request_replan(self, app: str, now: float | None = None) -> None:
        """Ask the planner to re-plan (read and cleared by the next epoch)."""
        try:
            self._ddb.update_item(
                TableName=self._table,
                Key={"pk": {"S": REPLAN_KEY}},
                UpdateExpression="ADD apps :a SET requested_at = :t",
                ExpressionAttributeValues={
                    ":a": {"SS": [app]},
                    ":t": {"N": repr(time.time() if now is None else now)},
                },
            )
        except AWS_ERRORS as exc:
            raise ControlError(f"cannot request planning: {exc}") from exc

    def replan_requested(self) -> set[str]:
        try:
            item = self._ddb.get_item(
                TableName=self._table, Key={"pk": {"S": REPLAN_KEY}}, ConsistentRead=True
            ).get("Item")
        except AWS_ERRORS as exc:
            raise ControlError(f"cannot read planning requests: {exc}") from exc
        return set(item.get("apps", {}).get("SS", [])) if item else set()

    def clear_replan(self, apps: Iterable[str]) -> None:
        names = sorted(apps)
        if not names:
            return
        try:
            self._ddb.update_item(
                TableName=self._table,
                Key={"pk": {"S": REPLAN_KEY}},
                UpdateExpression="DELETE apps :a",
                ExpressionAttributeValues={":a": {"SS": names}},
            )
        except AWS_ERRORS as exc:
            raise ControlError(f"cannot clear planning requests: {exc}") from exc


def profile_lookup(store: Any) -> Callable[[str], list[ProfileEntry] | None]:
    """``model -> entries | None`` over a :class:`profiles.store.ProfileStore` (None: no profile)."""
    from profiles.errors import ProfilesError

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
