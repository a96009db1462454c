"""From a registered app to the planner's problem: the usable hardware, the profiles the stack will
really see (p95 when measured, and the per-hop overhead of the data plane as latency only), and the
most children
one parent request sends along each edge (the dispatch-aware solve sizes children for their bursts)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from planner.models import ProfileEntry
from planner.robust import FAN_OUT_KEY
from profiles.onsite import onsite_entries, profile_source

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import Any

    from control.spec import RegistrationSpec
    from planner.models import HardwareSpec, Plan, ProblemSpec

__all__ = [
    "DERIVED_MARGIN",
    "adjust_profiles",
    "app_problem",
    "machine_count",
    "max_children",
    "plan_sources",
    "prefer_measured",
    "solve_within_caps",
    "usable_hardware",
]

#: a derived entry's duration is planned this much longer (x 1.5) until the class is measured: the
#: roofline derivation's leave-one-out put the H100 CUDA-graph points at 0.66-1.4x what was measured
#: (docs/profiles.md; 1 / 0.66 = 1.5); it is a bootstrap margin, not a bound (eager points went to 0.45)
DERIVED_MARGIN = 0.5


def _fields(entry: ProfileEntry) -> dict[str, Any]:
    return {**entry.model_dump(), **(entry.model_extra or {})}


def prefer_measured(
    profiles: Mapping[str, Sequence[ProfileEntry]], stored: Mapping[str, Sequence[Mapping[str, Any]]]
) -> tuple[dict[str, list[ProfileEntry]], dict[str, list[str]]]:
    """Measured on the instance wins: for each model of ``profiles`` (a registration's), the entries
    of a hardware class it is profiled on are replaced by the class's entries ``stored`` (the profile
    store: model -> entries) as measured on an instance of that class, when there are any. Returns
    the profiles and, per model, the classes replaced. A class the registration does not profile is
    not added (the app was not registered for it)."""
    out: dict[str, list[ProfileEntry]] = {}
    replaced: dict[str, list[str]] = {}
    for model, entries in profiles.items():
        onsite = onsite_entries(list(stored.get(model, [])))
        have = {entry.hardware for entry in entries}
        swap = sorted(hw for hw in onsite if hw in have)
        if not swap:
            out[model] = list(entries)
            continue
        kept = [entry for entry in entries if entry.hardware not in swap]
        out[model] = kept + [ProfileEntry.model_validate(raw) for hw in swap for raw in onsite[hw]]
        replaced[model] = swap
    return out, replaced


def plan_sources(spec: RegistrationSpec, plan: Plan) -> dict[str, dict[str, str]]:
    """Module -> hardware its plan uses -> what the planned figures rest on
    (:func:`profiles.onsite.profile_source` of the spec's profiles: measured on instance, measured,
    derived)."""
    out: dict[str, dict[str, str]] = {}
    for name, mp in plan.modules.items():
        mod = spec.modules.get(name)
        if mod is None:
            continue
        entries = [_fields(entry) for entry in spec.profiles.get(mod.model, [])]
        out[name] = {g.hardware: profile_source(entries, g.hardware) for g in mp.groups}
    return out


def adjust_profiles(
    problem: ProblemSpec,
    overhead_s: float,
    corrections: Mapping[str, float] | None = None,
    *,
    hop_as_latency: bool = False,
    hops: Mapping[str, float] | None = None,
    derived_margin: float = 0.0,
) -> ProblemSpec:
    """Every profile entry's duration (device time) becomes its p95 (``p95_s``, when measured) plus the
    service-time correction learned for the module on that hardware (``"module@hardware"`` -> s,
    :mod:`control.calibration`), and ``overhead_s``, what one hop of the data plane takes around the
    model (SQS send, delivery and receive, grace), is added:

    - ``hop_as_latency`` (the control loop, :func:`app_problem`): as the entry's ``overhead_s``, latency
      only: the worker overlaps the hop with the device, so it lengthens every worst case and occupies
      no machine (throughput c b / duration);
    - otherwise (the local stack's conservative plan): into the duration, as if the device were busy
      for it.

    ``hops`` (module -> s, :mod:`control.hops`): a module's measured hop, in place of ``overhead_s``.
    ``derived_margin``: a derived entry's (``source: derived``) duration times ``1 + derived_margin``
    (the entry records it as ``derived_margin``)."""
    corr = corrections or {}
    measured = hops or {}
    modules = {}
    for name, mod in problem.modules.items():
        hop = measured.get(name, overhead_s)
        entries = []
        for e in mod.profile:
            extra = e.model_extra or {}
            p95 = float(extra.get("p95_s") or e.duration_s)
            margin: dict[str, float] = {}
            if derived_margin and extra.get("source") == "derived":
                p95 *= 1 + derived_margin
                margin = {"derived_margin": derived_margin}
            fix = corr.get(f"{name}@{e.hardware}", 0.0)
            update: dict[str, object]
            if hop_as_latency:
                update = {"duration_s": p95 + fix, "overhead_s": e.overhead_s + hop, **margin}
            else:
                update = {"duration_s": p95 + hop + fix, **margin}
            entries.append(e.model_copy(update=update))
        modules[name] = mod.model_copy(update={"profile": entries})
    return problem.model_copy(update={"modules": modules})


def max_children(edges: Iterable[tuple[str, str, float]]) -> list[list[object]]:
    """``[[parent, child, n], ...]``: the most children one parent request sends along each edge,
    ``ceil`` of its fan-out factor (a data plane whose fan-out varies per request sends up to that;
    the problem extra :data:`planner.robust.FAN_OUT_KEY`, as the local stack plans)."""
    return [[src, dst, float(math.ceil(f - 1e-9))] for src, dst, f in edges]


def usable_hardware(
    spec: RegistrationSpec, catalog: Mapping[str, HardwareSpec], available: Iterable[str] | None
) -> list[str]:
    """Hardware the app may run on: its ``hardware`` list (default: the whole catalog) that has an
    EC2 instance type (or a mapping in ``instance_types``) and, when known, a worker group."""
    allowed = spec.hardware if spec.hardware is not None else list(catalog)
    avail = set(available) if available is not None else None
    return [
        h
        for h in allowed
        if h in catalog
        and (catalog[h].instance_type or spec.instance_types.get(h))
        and (avail is None or h in avail)
    ]


def app_problem(
    spec: RegistrationSpec,
    frame_rate: float,
    catalog: Mapping[str, HardwareSpec],
    available: Iterable[str] | None,
    overhead_s: float,
    corrections: Mapping[str, float] | None = None,
    hops: Mapping[str, float] | None = None,
    derived_margin: float = DERIVED_MARGIN,
) -> ProblemSpec:
    """The planner's problem for ``spec`` at ``frame_rate`` frames/s, for its planning SLO (the SLO
        less its ``admission_reserve``, :attr:`RegistrationSpec.planning_slo_s`), with the extra
        ``max_children_per_request`` (:func:`max_children`) when the app has edges and the app's
        service-time ``corrections`` added to its profiles and each module's hop (its measured one in
    ``hops``, module -> s, else ``overhead_s``) as latency and derived entries planned
    ``derived_margin`` longer (:func:`adjust_profiles`). Raises
        ``ValueError`` naming the module that has no profile on the usable hardware."""
    hw = usable_hardware(spec, catalog, available)
    problem = spec.app_spec().to_problem(
        frame_rate, spec.profiles, {h: catalog[h] for h in hw}, spec.planning_slo_s
    )
    for name, mod in problem.modules.items():
        if not mod.profile:
            model = spec.modules[name].model
            have = sorted({e.hardware for e in spec.profiles.get(model, [])})
            raise ValueError(
                f"module {name!r} (model {model}) has no profile on the usable hardware "
                f"({', '.join(hw) or 'none'}), profiled on: {', '.join(have) or 'nothing'}"
            )
    used = {e.hardware for m in problem.modules.values() for e in m.profile}
    update: dict[str, object] = {
        "hardware": {h: s for h, s in problem.hardware.items() if h in used},
        "name": spec.name,
    }
    if spec.edges:
        update[FAN_OUT_KEY] = max_children(spec.edges)
    problem = problem.model_copy(update=update)
    return adjust_profiles(
        problem, overhead_s, corrections, hop_as_latency=True, hops=hops, derived_margin=derived_margin
    )


def machine_count(plan: Plan, hardware: str) -> dict[str, int]:
    """Machines of ``hardware`` per module of ``plan``."""
    return {m: sum(g.machines for g in mp.groups if g.hardware == hardware) for m, mp in plan.modules.items()}


def solve_within_caps(
    problem: ProblemSpec, solve: Callable[[ProblemSpec], Plan], caps: Mapping[str, int]
) -> tuple[Plan, ProblemSpec, list[str]]:
    """Solve, then, while the plan uses more machines of a capped hardware class than ``caps``
    allows (e.g. the local stack's real CPU: this host's cores run at most one such machine), take
    that class away from the module with the most machines on it and solve again. Returns the plan,
    the problem it solves (moved modules without the class) and one note per module moved. When no
    module can move (the class is its only one) the last plan is returned: the caller decides."""
    notes: list[str] = []
    while True:
        plan = solve(problem)
        counts = {hw: machine_count(plan, hw) for hw in sorted(caps)}
        over = [hw for hw, per in counts.items() if sum(per.values()) > caps[hw]]
        if not over:
            return plan, problem, notes
        hw = over[0]
        per = counts[hw]
        worst = max(per, key=lambda m: per[m])  # the first in module order among equals
        mod = problem.modules[worst]
        keep = [e for e in mod.profile if e.hardware != hw]
        if not keep:
            return plan, problem, notes
        notes.append(f"{worst}: moved off {hw} (at most {caps[hw]} machine(s) of it)")
        problem = problem.model_copy(
            update={"modules": {**problem.modules, worst: mod.model_copy(update={"profile": keep})}}
        )
