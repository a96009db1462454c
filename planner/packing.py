"""Fleet packing: the planned machines of many apps onto whole instances, one hardware type each.

Every planned machine is a *share*. A share at (near) full load gets its own instance; partial shares of
different modules and apps share an instance when the latency model allows it. docs/packing.md has the
argument; in short:

- An instance runs its shares' batches one at a time in the order their windows close (FIFO; a share
  with concurrency ``c`` may overlap with others, which only finishes batches earlier). A share's
  batches become ready at its windows' ends; a *co-locatable* share's windows are exactly periodic
  (one configuration per module, equal machines: every machine's windows are evenly spaced; or the
  residual of :func:`planner.fleet.split_residual`: one window per period), so it offers at most
  ``1 + x f / b`` batches in any interval of length ``x``.
- With ``busy_j = d_j f_j / b_j`` (the fraction of time share ``j`` holds the device if it ran alone,
  one batch at a time) and ``sum busy_j <= 1``, a FIFO server completes a batch that becomes ready at
  ``a`` by ``a + sum_j d_j`` (network calculus: work arrived in ``[s, a]`` is at most
  ``sum_j d_j (1 + (a - s) f_j / b_j) = D + (a - s) U``). So co-location adds at most
  ``added_wait_i = sum_{j != i} d_j`` to share ``i``'s worst case, whatever the phases of the schedules.
- Each app's path slack (SLO minus the path's planned worst case) is shared among the modules that have
  co-locatable shares on that path; a share joins an instance only if every share there stays within
  its module's allowance.

Packing is best-fit decreasing by busy fraction (Nexus's squishy bin packing, with the condition above in
place of its duty-cycle merge), after keeping the previous epoch's instances whose shares are unchanged.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import PlannerError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from planner.models import ModulePlan, Plan, ProblemSpec

__all__ = [
    "FleetPlan",
    "Instance",
    "PackingError",
    "Share",
    "ShareReplay",
    "adversarial_phases",
    "allowances",
    "check_fleet",
    "colocatable_groups",
    "pack",
    "plan_shares",
    "simulate_instance",
]

TOL = 1e-9
_REL = 1e-9
#: Keep the previous epoch's instances unless a fresh packing bills this fraction less.
REPACK_THRESHOLD = 0.03

ShareKey = tuple[str, str, str, int, int, float]


class PackingError(PlannerError):
    """The apps cannot be packed together (e.g. two apps price one hardware type differently)."""


class Share(BaseModel):
    """One planned machine of one module of one app, placed on an instance. ``group`` and ``machine``
    index that app's ``Plan.modules[module].groups``."""

    model_config = ConfigDict(frozen=True)

    app: str
    module: str
    group: int = Field(ge=0)
    machine: int = Field(ge=0)
    hardware: str
    batch: int = Field(ge=1)
    concurrency: int = Field(ge=1)
    duration_s: float = Field(gt=0)
    rate: float = Field(ge=0, description="req/s this machine carries (rate_per_machine, dummy included)")
    occupancy: float = Field(ge=0, description="fraction of the instance's time it uses: f / t")
    added_wait_s: float = Field(
        default=0.0, ge=0, description="worst-case extra queueing caused by co-located shares"
    )
    busy: float = Field(
        default=0.0, ge=0, description="device time of one batch at a time: d f / b (= occupancy * c)"
    )

    @property
    def key(self) -> ShareKey:
        """What a worker loads: the same key on the same slot means no model reload."""
        return (self.app, self.module, self.hardware, self.batch, self.concurrency, self.duration_s)

    @property
    def ident(self) -> tuple[str, str, int, int]:
        return (self.app, self.module, self.group, self.machine)


class Instance(BaseModel):
    """One whole instance of ``hardware``; ``slot`` is stable within the fleet (e.g. ``t4/3``) and reused
    across epochs when the content is unchanged. With several shares, batches run one at a time in the
    order their windows close."""

    slot: str
    hardware: str
    shares: list[Share]

    @property
    def occupancy(self) -> float:
        return sum(s.occupancy for s in self.shares)

    @property
    def busy(self) -> float:
        return sum(s.busy for s in self.shares)


class FleetPlan(BaseModel):
    """Whole instances per hardware type and the figures to judge them by."""

    instances: list[Instance]
    prices: dict[str, float] = Field(description="hardware -> $/h")
    occupancy_per_hour: float = Field(description="lower bound: sum of the apps' occupancy cost")
    dedicated_per_hour: float = Field(description="one instance per planned machine")

    def counts(self) -> dict[str, int]:
        """Instances per hardware type (every priced type listed, zero included)."""
        out = dict.fromkeys(sorted(self.prices), 0)
        for inst in self.instances:
            out[inst.hardware] = out.get(inst.hardware, 0) + 1
        return out

    @property
    def billed_per_hour(self) -> float:
        return sum(self.prices[i.hardware] for i in self.instances)

    @property
    def shared_instances(self) -> int:
        return sum(1 for i in self.instances if len(i.shares) > 1)


# --------------------------------------------------------------------------- shares of a plan


def _prices(apps: Mapping[str, tuple[ProblemSpec, Plan]]) -> dict[str, float]:
    prices: dict[str, float] = {}
    for name in sorted(apps):
        for hw, spec in apps[name][0].hardware.items():
            seen = prices.setdefault(hw, spec.price_per_hour)
            if abs(seen - spec.price_per_hour) > 1e-6 * seen:
                raise PackingError(
                    f"app {name!r} prices {hw!r} at {spec.price_per_hour:g} $/h, another app at {seen:g} $/h"
                )
    return prices


def _same_config(a: object, b: object) -> bool:
    keys = ("hardware", "batch", "concurrency", "duration_s")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


def colocatable_groups(mp: ModulePlan, latency_model: str = "tc") -> dict[int, float]:
    """Groups of a module plan whose machines may share an instance, with each one's standalone worst
    case (s). Only TC plans whose windows are exactly periodic per machine qualify:

    - one group (one configuration, equal machines): every machine's windows are evenly spaced;
      standalone worst case: the module's;
    - ``[k machines at full throughput t, 1 machine at t / q]`` of one configuration (q >= 2 integer):
      the schedule's period holds q windows of every full machine and ONE of the residual, so the
      residual's windows are evenly spaced too. Its standalone worst case is the module's, less
      ``split_penalty_s`` when the plan records it (the b / W the full machines wait beyond
      Theorem 1, which the residual never waits: one window per period, load <= 1/2).
    """
    gs = mp.groups
    if latency_model != "tc" or not gs or any(g.duration_s <= 0 for g in gs):
        return {}
    wcl = mp.worst_case_latency_s
    if len(gs) == 1:
        return {0: wcl} if gs[0].rate_per_machine > 0 else {}
    if len(gs) == 2 and _same_config(gs[0], gs[1]) and gs[1].machines == 1:
        full, res = gs
        t = full.concurrency * full.batch / full.duration_s
        q = t / res.rate_per_machine if res.rate_per_machine > 0 else 0.0
        if (
            math.isclose(full.rate_per_machine, t, rel_tol=_REL)
            and q >= 2 - 1e-9
            and abs(q - round(q)) <= 1e-9 * q
        ):
            penalty = float((mp.model_extra or {}).get("split_penalty_s", 0.0))
            return {1: wcl - max(0.0, penalty)}
    return {}


def plan_shares(app: str, plan: Plan) -> list[Share]:
    """Every planned machine of ``plan`` as a share (not yet placed; no added wait)."""
    out: list[Share] = []
    for module, mp in plan.modules.items():
        for gi, g in enumerate(mp.groups):
            if g.duration_s <= 0:
                raise PackingError(f"app {app!r} module {module!r} group {gi}: no duration_s in the plan")
            t = g.concurrency * g.batch / g.duration_s
            out.extend(
                Share(
                    app=app,
                    module=module,
                    group=gi,
                    machine=m,
                    hardware=g.hardware,
                    batch=g.batch,
                    concurrency=g.concurrency,
                    duration_s=g.duration_s,
                    rate=g.rate_per_machine,
                    occupancy=g.rate_per_machine / t,
                    busy=g.rate_per_machine * g.duration_s / g.batch,
                )
                for m in range(g.machines)
            )
    return out


def _latency_model(plan: Plan) -> str:
    return str((plan.model_extra or {}).get("latency_model", "tc"))


# --------------------------------------------------------------------------- allowances


def allowances(problem: ProblemSpec, plan: Plan, colocatable: set[str]) -> dict[str, float]:
    """Added wait each module may take: every path's slack (SLO minus the planned worst cases) split
    evenly among the path's modules in ``colocatable``; a module on several paths takes the smallest."""
    out = dict.fromkeys(plan.modules, math.inf)
    for path in problem.paths():
        slack = problem.slo_s - sum(plan.modules[m].worst_case_latency_s for m in path)
        users = [m for m in path if m in colocatable]
        for m in users:
            out[m] = min(out[m], max(0.0, slack - 1e-9) / len(users))
    return {m: (0.0 if math.isinf(a) else a) for m, a in out.items()}


@dataclass(eq=False)
class _Item:
    share: Share
    flexible: bool  # may share an instance
    allowance: float  # largest added wait this share may take (s)
    order: int  # deterministic tie-break

    @property
    def hw(self) -> str:
        return self.share.hardware


@dataclass(eq=False)
class _Bin:
    hw: str
    items: list[_Item] = field(default_factory=list)
    slot: str | None = None
    busy: float = 0.0
    dur: float = 0.0  # sum of durations
    headroom: float = math.inf  # min over items of allowance - added wait

    def fits(self, it: _Item) -> bool:
        if not self.items:
            return True
        if not it.flexible or not self.items[0].flexible:
            return False
        d = it.share.duration_s
        return (
            self.busy + it.share.busy <= 1 + TOL
            and d <= self.headroom + TOL
            and self.dur <= it.allowance + TOL
        )

    def add(self, it: _Item) -> None:
        d = it.share.duration_s
        self.headroom = min(self.headroom - d, it.allowance - self.dur)
        self.items.append(it)
        self.busy += it.share.busy
        self.dur += d


def _items(apps: Mapping[str, tuple[ProblemSpec, Plan]]) -> list[_Item]:
    out: list[_Item] = []
    for name in sorted(apps):
        problem, plan = apps[name]
        model = _latency_model(plan)
        flex = {m: colocatable_groups(mp, model) for m, mp in plan.modules.items()}
        allow = allowances(problem, plan, {m for m, g in flex.items() if g})
        for s in plan_shares(name, plan):
            base = flex[s.module].get(s.group)
            ok = base is not None and s.busy < 1 - 1e-6
            bonus = plan.modules[s.module].worst_case_latency_s - base if base is not None else 0.0
            out.append(_Item(s, ok, allow[s.module] + max(0.0, bonus) if ok else 0.0, len(out)))
    return out


# --------------------------------------------------------------------------- packing


def _best_fit(items: list[_Item], bins: list[_Bin]) -> None:
    """Best-fit decreasing: each item (largest busy first) joins the feasible bin it fills most."""
    by_hw: dict[str, list[_Bin]] = defaultdict(list)
    for b in bins:
        if b.items and b.items[0].flexible:
            by_hw[b.hw].append(b)
    for it in sorted(items, key=lambda i: (-i.share.busy, -i.share.duration_s, i.order)):
        best: _Bin | None = None
        if it.flexible:
            for b in by_hw[it.hw]:
                if b.fits(it) and (best is None or b.busy > best.busy):
                    best = b
        if best is None:
            best = _Bin(it.hw)
            bins.append(best)
            if it.flexible:
                by_hw[it.hw].append(best)
        best.add(it)


def _sticky_bins(previous: FleetPlan, items: list[_Item]) -> tuple[list[_Bin], list[_Item]]:
    """The previous instances, each keeping the shares whose key is unchanged (as long as they still fit
    together); returns those bins and the items left to place."""
    free: dict[ShareKey, list[_Item]] = defaultdict(list)
    for it in items:
        free[it.share.key].append(it)
    for lst in free.values():
        lst.sort(key=lambda i: i.order)
    bins: list[_Bin] = []
    for inst in sorted(previous.instances, key=lambda i: _slot_order(i.slot)):
        b = _Bin(inst.hardware, slot=inst.slot)
        for old in sorted(inst.shares, key=lambda s: (-s.busy, s.ident)):
            cands = free.get(old.key)
            if not cands:
                continue
            match = next((c for c in cands if c.share.ident == old.ident), cands[0])
            if b.fits(match):
                cands.remove(match)
                b.add(match)
        if b.items:
            bins.append(b)
    rest = [it for lst in free.values() for it in lst]
    rest.sort(key=lambda i: i.order)
    return bins, rest


def _cost(bins: list[_Bin], prices: Mapping[str, float]) -> float:
    return sum(prices[b.hw] for b in bins)


def _name_slots(bins: list[_Bin], previous: FleetPlan | None) -> None:
    """Bins without a slot take the free previous slot of their hardware with the most equal share keys,
    else a slot name the previous fleet did not use."""
    taken = {b.slot for b in bins if b.slot is not None}
    old: dict[str, list[tuple[str, list[ShareKey]]]] = defaultdict(list)
    if previous is not None:
        for inst in previous.instances:
            if inst.slot not in taken:
                old[inst.hardware].append((inst.slot, [s.key for s in inst.shares]))
    pairs: list[tuple[int, str, int]] = []
    unnamed = [b for b in bins if b.slot is None]
    for bi, b in enumerate(unnamed):
        keys = [it.share.key for it in b.items]
        for slot, old_keys in old[b.hw]:
            common = sum(min(keys.count(k), old_keys.count(k)) for k in set(keys))
            if common:
                pairs.append((-common, slot, bi))
    for _, slot, bi in sorted(pairs, key=lambda p: (p[0], _slot_order(p[1]), p[2])):
        if unnamed[bi].slot is None and slot not in taken:
            unnamed[bi].slot = slot
            taken.add(slot)
    reserved = taken | ({i.slot for i in previous.instances} if previous is not None else set())
    names = _Slots(reserved)
    for b in unnamed:
        if b.slot is None:
            b.slot = names.new(b.hw)


class _Slots:
    """Slot names per hardware: ``hw/n`` with the smallest n not reserved."""

    def __init__(self, reserved: Iterable[str]) -> None:
        self.used: dict[str, set[int]] = defaultdict(set)
        for slot in reserved:
            hw, _, n = slot.rpartition("/")
            if n.isdigit():
                self.used[hw].add(int(n))

    def new(self, hw: str) -> str:
        used = self.used[hw]
        n = 0
        while n in used:
            n += 1
        used.add(n)
        return f"{hw}/{n}"


def _slot_order(slot: str) -> tuple[str, int]:
    hw, _, n = slot.rpartition("/")
    return (hw, int(n)) if n.isdigit() else (slot, -1)


def _instance(b: _Bin) -> Instance:
    assert b.slot is not None
    shares = []
    ordered = sorted(b.items, key=lambda i: i.order)
    total = sum(i.share.duration_s for i in ordered)
    for it in ordered:
        wait = total - it.share.duration_s if len(ordered) > 1 else 0.0
        shares.append(it.share.model_copy(update={"added_wait_s": wait}))
    return Instance(slot=b.slot, hardware=b.hw, shares=shares)


def pack(
    apps: Mapping[str, tuple[ProblemSpec, Plan]],
    *,
    previous: FleetPlan | None = None,
    repack_threshold: float = REPACK_THRESHOLD,
) -> FleetPlan:
    """Place every planned machine of every app on a whole instance of its hardware type.

    Co-locatable partial shares (:func:`colocatable_groups`) share instances when the busy fractions sum
    to at most 1 and every share's added wait stays within its module's allowance (:func:`allowances`);
    every other share gets its own instance. ``previous`` (the last epoch's fleet) keeps unchanged shares
    on their slots so workers do not reload models, unless packing afresh bills ``repack_threshold``
    less. Deterministic for equal inputs.
    """
    prices = _prices(apps)
    items = _items(apps)
    fresh: list[_Bin] = []
    _best_fit(items, fresh)
    bins = fresh
    if previous is not None:
        sticky, rest = _sticky_bins(previous, items)
        _best_fit(rest, sticky)
        if _cost(sticky, prices) <= _cost(fresh, prices) * (1 + repack_threshold) + TOL:
            bins = sticky
        else:
            bins = fresh
            for b in bins:
                b.slot = None
    _name_slots(bins, previous)
    instances = sorted((_instance(b) for b in bins), key=lambda i: _slot_order(i.slot))
    return FleetPlan(
        instances=instances,
        prices=prices,
        occupancy_per_hour=sum(prices[it.hw] * it.share.occupancy for it in items),
        dedicated_per_hour=sum(prices[it.hw] for it in items),
    )


# --------------------------------------------------------------------------- checker


def check_fleet(fleet: FleetPlan, apps: Mapping[str, tuple[ProblemSpec, Plan]]) -> list[str]:
    """Every way ``fleet`` breaks the rules for ``apps``, as readable strings (empty list: valid).

    Checks: every planned machine placed exactly once, with the plan's configuration and rate; shares on
    an instance of their hardware; slots unique; occupancy <= 1 per instance; on a shared instance only
    co-locatable shares, busy fractions summing to <= 1 and each share's recorded added wait covering
    the sum of the other shares' durations; on every root-to-leaf path, each module's worst case
    (the plan's, or a co-located share's standalone bound plus its added wait, if larger) within the SLO.
    """
    errors: list[str] = []
    planned = {s.ident: s for name in sorted(apps) for s in plan_shares(name, apps[name][1])}
    seen: dict[tuple[str, str, int, int], str] = {}
    slots: set[str] = set()
    worst: dict[tuple[str, str], float] = {}
    for inst in fleet.instances:
        if inst.slot in slots:
            errors.append(f"slot {inst.slot} used twice")
        slots.add(inst.slot)
        if inst.hardware not in fleet.prices:
            errors.append(f"{inst.slot}: hardware {inst.hardware!r} has no price")
        if not inst.shares:
            errors.append(f"{inst.slot}: no shares (an idle instance)")
        if inst.occupancy > 1 + 1e-6:
            errors.append(f"{inst.slot}: occupancy {inst.occupancy:.4f} above 1")
        for s in inst.shares:
            if s.ident in seen:
                errors.append(f"{_name(s)} placed on {seen[s.ident]} and {inst.slot}")
            seen[s.ident] = inst.slot
            if s.hardware != inst.hardware:
                errors.append(f"{_name(s)} on {inst.slot}: {s.hardware} share on a {inst.hardware} instance")
            ref = planned.get(s.ident)
            if ref is None:
                errors.append(f"{_name(s)}: no such machine in the plans")
            elif not _same_share(ref, s):
                errors.append(f"{_name(s)}: configuration or rate differs from the plan")
        _check_shared(inst, apps, errors, worst)
    errors.extend(f"{_name(s)} not placed" for ident, s in planned.items() if ident not in seen)
    for name in sorted(apps):
        problem, plan = apps[name]
        for path in problem.paths():
            lat = sum(max(plan.modules[m].worst_case_latency_s, worst.get((name, m), 0.0)) for m in path)
            if lat > problem.slo_s + 1e-6:
                errors.append(
                    f"app {name!r} path {' -> '.join(path)}: {lat:.6f} s with added waits, "
                    f"SLO {problem.slo_s} s"
                )
    return errors


def _check_shared(
    inst: Instance,
    apps: Mapping[str, tuple[ProblemSpec, Plan]],
    errors: list[str],
    worst: dict[tuple[str, str], float],
) -> None:
    """Rules of co-location; records each share's worst case with its added wait in ``worst``."""
    shared = len(inst.shares) > 1
    if shared and inst.busy > 1 + 1e-6:
        errors.append(f"{inst.slot}: busy fractions sum to {inst.busy:.4f}, above 1")
    total = sum(s.duration_s for s in inst.shares)
    for s in inst.shares:
        if s.app not in apps or s.module not in apps[s.app][1].modules:
            continue
        plan = apps[s.app][1]
        mp = plan.modules[s.module]
        base = colocatable_groups(mp, _latency_model(plan)).get(s.group)
        wait = s.added_wait_s
        if shared:
            if base is None:
                errors.append(f"{_name(s)} on shared {inst.slot}: its module's windows are not periodic")
                continue
            if wait < total - s.duration_s - 1e-9:
                errors.append(
                    f"{_name(s)} on {inst.slot}: added wait {wait:.6f} s below the others' "
                    f"durations {total - s.duration_s:.6f} s"
                )
                wait = total - s.duration_s
        k = (s.app, s.module)
        own = base if base is not None else mp.worst_case_latency_s
        worst[k] = max(worst.get(k, 0.0), own + wait)


def _same_share(ref: Share, s: Share) -> bool:
    return (ref.hardware, ref.batch, ref.concurrency) == (s.hardware, s.batch, s.concurrency) and all(
        math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        for a, b in ((ref.duration_s, s.duration_s), (ref.rate, s.rate), (ref.busy, s.busy))
    )


def _name(s: Share) -> str:
    return f"{s.app}/{s.module}[{s.group}.{s.machine}]"


# --------------------------------------------------------------------------- replay of one instance


class ShareReplay(BaseModel):
    """One share of a replayed instance: measured worst case (window + queue wait + duration) against
    its bound (standalone worst case + added wait), and the worst queue wait against ``added_wait_s``."""

    model_config = ConfigDict(frozen=True)

    share: str
    batches: int
    measured_worst_s: float
    bound_s: float
    max_wait_s: float
    added_wait_s: float

    @property
    def within(self) -> bool:
        return self.measured_worst_s <= self.bound_s + 1e-9 and self.max_wait_s <= self.added_wait_s + 1e-9


def simulate_instance(
    instance: Instance,
    apps: Mapping[str, tuple[ProblemSpec, Plan]],
    *,
    phases: Mapping[tuple[str, str, int, int], float] | None = None,
    periods: int = 200,
    seed: int = 0,
) -> list[ShareReplay]:
    """Replay one instance: each share's batches become ready at its machine's window ends in its module's
    dispatch schedule (:func:`planner.dispatch.build_schedule`), shifted by the share's phase (random in
    ``[0, period)`` unless given: apps have independent schedule origins); the device runs them one at a
    time in ready order, each for its duration (the worst case of the worker's device, which lets
    batches with concurrency > 1 overlap). ``periods`` of the longest schedule period are replayed."""
    import numpy as np

    from planner.dispatch import build_schedule

    rng = np.random.default_rng(seed)
    ready_parts, dur_parts, who_parts, window_parts = [], [], [], []
    longest = 0.0
    scheds = {}
    for s in instance.shares:
        plan = apps[s.app][1]
        if (s.app, s.module) not in scheds:
            prices = {h: x.price_per_hour for h, x in apps[s.app][0].hardware.items()}
            scheds[(s.app, s.module)] = build_schedule(s.module, plan.modules[s.module], prices)
        longest = max(longest, scheds[(s.app, s.module)].period_s)
    for i, s in enumerate(instance.shares):
        sched = scheds[(s.app, s.module)]
        mine = [w for w in sched.windows if (w.group, w.machine) == (s.group, s.machine)]
        ends = np.array([w.end_s for w in mine])
        lengths = np.array([w.end_s - w.start_s for w in mine])
        cycles = int(math.ceil(periods * longest / sched.period_s)) + 1
        phase = (phases or {}).get(s.ident)
        shift = float(rng.uniform(0, sched.period_s)) if phase is None else phase
        ready = (ends[None, :] + sched.period_s * np.arange(cycles)[:, None]).ravel() + shift
        ready_parts.append(ready)
        window_parts.append(np.tile(lengths, cycles))
        dur_parts.append(np.full(len(ready), s.duration_s))
        who_parts.append(np.full(len(ready), i))
    ready, dur = np.concatenate(ready_parts), np.concatenate(dur_parts)
    who, window = np.concatenate(who_parts), np.concatenate(window_parts)
    order = np.lexsort((who, ready))
    ready, dur, who, window = ready[order], dur[order], who[order], window[order]
    cum = np.cumsum(dur)
    completion = np.maximum.accumulate(ready - (cum - dur)) + cum  # Lindley: C_k = max(r_k, C_k-1) + d_k
    wait = completion - dur - ready
    out = []
    for i, s in enumerate(instance.shares):
        mask = who == i
        plan = apps[s.app][1]
        base = colocatable_groups(plan.modules[s.module], _latency_model(plan)).get(
            s.group, plan.modules[s.module].worst_case_latency_s
        )
        out.append(
            ShareReplay(
                share=_name(s),
                batches=int(mask.sum()),
                measured_worst_s=float(np.max(window[mask] + wait[mask] + dur[mask])),
                bound_s=base + s.added_wait_s,
                max_wait_s=float(np.max(wait[mask])),
                added_wait_s=s.added_wait_s,
            )
        )
    return out


def adversarial_phases(
    instance: Instance, apps: Mapping[str, tuple[ProblemSpec, Plan]], victim: int
) -> dict[tuple[str, str, int, int], float]:
    """Phases under which every other share's first batch becomes ready just before the ``victim``'s first
    batch (the case behind ``added_wait_s``), for :func:`simulate_instance`."""
    from planner.dispatch import build_schedule

    firsts = {}
    for s in instance.shares:
        prices = {h: x.price_per_hour for h, x in apps[s.app][0].hardware.items()}
        sched = build_schedule(s.module, apps[s.app][1].modules[s.module], prices)
        firsts[s.ident] = min(w.end_s for w in sched.windows if (w.group, w.machine) == (s.group, s.machine))
    target = instance.shares[victim]
    at = 10.0 + firsts[target.ident]  # victim's first batch ready at t = 10 + its first end
    out = {target.ident: 10.0}
    for k, s in enumerate(x for j, x in enumerate(instance.shares) if j != victim):
        out[s.ident] = at - 1e-7 * (k + 1) - firsts[s.ident]
    return out
