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

With ``align``, modules served by one machine first take turns in *aligned duty cycles* (Nexus's
merge): the shares of an instance run one batch each per common cycle (the shortest of their batch
intervals; the others' rates are raised to it, each share in the configuration with the shortest batch
that still carries its rate), at phases the packer chooses so that the turns do not overlap. Their added
wait is then 0 while the phases are honoured (``schedule_phase_s`` in the plan, see
:func:`apply_phases` and :func:`planner.dispatch.schedule_origin`); if they are not, the FIFO bound above
still holds (``fifo_wait_s``), because ``sum d <= cycle`` implies ``sum busy <= 1``.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
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
    "ALIGN_GUARD_S",
    "adversarial_phases",
    "aligned_phases",
    "allowances",
    "apply_phases",
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
#: Idle time after every share's turn in an aligned duty cycle (s): batch release jitter it absorbs.
ALIGN_GUARD_S = 1e-4

ShareKey = tuple[str, str, str, int, int, float]
Option = tuple[int, int, float]  # (batch, concurrency, duration_s): one configuration on the share's hardware


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
    phase_s: float | None = Field(
        default=None,
        ge=0,
        description="on an aligned instance: the module's schedule phase (s after t = 0, mod the cycle); "
        "its batches are ready at phase_s + k * cycle_s",
    )
    fifo_wait_s: float = Field(
        default=0.0, ge=0, description="worst-case added wait if the phases are not honoured (FIFO bound)"
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
    cycle_s: float | None = Field(
        default=None, gt=0, description="aligned duty cycle: every share's batch interval (None: FIFO)"
    )

    @property
    def aligned(self) -> bool:
        return self.cycle_s is not None and len(self.shares) > 1

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
    occupancy_per_hour: float = Field(
        description="the packed plans' occupancy cost (dummy load included): no packing of them bills less"
    )
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
    elastic: bool = False  # the module's only machine: its batch interval may shrink to a common cycle
    options: list[Option] = field(default_factory=list)  # elastic: configurations, shortest first
    floor: float = 0.0  # elastic: the least rate the module must carry (req/s)
    limit: float = math.inf  # elastic: the largest d + b / f allowed (its current one)

    @property
    def hw(self) -> str:
        return self.share.hardware

    def best(self, cycle: float) -> Option | None:
        """The configuration with the shortest batch that runs one batch per ``cycle`` (batch >= floor *
        cycle, duration <= cycle) without lengthening the worst case (d + cycle <= limit)."""
        for b, c, d in self.options:
            if b >= self.floor * cycle * (1 - 1e-12) and d <= cycle + TOL and d + cycle <= self.limit + TOL:
                return (b, c, d)
        return None

    @property
    def period(self) -> float:
        """Interval between this machine's batches, b / f (s)."""
        return self.share.batch / self.share.rate if self.share.rate > 0 else math.inf


@dataclass(eq=False)
class _Bin:
    hw: str
    items: list[_Item] = field(default_factory=list)
    slot: str | None = None
    busy: float = 0.0
    dur: float = 0.0  # sum of durations
    headroom: float = math.inf  # min over items of allowance - added wait
    aligned: bool = False  # shares take turns in a common duty cycle (phases from the packer)
    cycle: float = math.inf  # aligned: the common batch interval (the smallest of the shares')
    guard: float = 0.0  # aligned: idle time after every share's turn (s)
    choice: dict[int, Option] = field(default_factory=dict)  # aligned: item order -> configuration

    def _turns(self, it: _Item) -> tuple[float, dict[int, Option], float] | None:
        """Aligned: (cycle, each share's configuration, sum of turns incl. guards) with ``it`` added, or
        None when the turns do not fit the cycle."""
        cycle = min(self.cycle, it.period)
        opt = it.best(cycle)
        if opt is None:
            return None
        if cycle == self.cycle:
            choice = {**self.choice, it.order: opt}
            span = self.dur + opt[2] + len(choice) * self.guard
        else:  # a shorter cycle: every share picks its configuration again
            choice = {it.order: opt}
            for x in self.items:
                o = x.best(cycle)
                if o is None:
                    return None
                choice[x.order] = o
            span = sum(o[2] for o in choice.values()) + len(choice) * self.guard
        return (cycle, choice, span) if span <= cycle + TOL else None

    def fits(self, it: _Item) -> bool:
        if not self.items:
            return not self.aligned or it.elastic
        if not it.flexible or not self.items[0].flexible:
            return False
        if self.aligned:
            return it.elastic and self._turns(it) is not None
        d = it.share.duration_s
        return (
            self.busy + it.share.busy <= 1 + TOL
            and d <= self.headroom + TOL
            and self.dur <= it.allowance + TOL
        )

    def fill(self, it: _Item) -> float:
        """How full the bin is with ``it`` added (best fit picks the fullest)."""
        if self.aligned:
            turns = self._turns(it) if self.items else None
            return turns[2] / turns[0] if turns is not None else 0.0
        return self.busy + it.share.busy

    def add(self, it: _Item) -> None:
        if self.aligned:
            turns = self._turns(it)
            if turns is None:  # alone: the share's own configuration and interval
                own = (it.share.batch, it.share.concurrency, it.share.duration_s)
                turns = (it.period, {it.order: own}, own[2])
            self.cycle, self.choice = turns[0], turns[1]
            self.dur = sum(o[2] for o in self.choice.values())
            self.items.append(it)
            return
        d = it.share.duration_s
        self.headroom = min(self.headroom - d, it.allowance - self.dur)
        self.items.append(it)
        self.busy += it.share.busy
        self.dur += d
        self.cycle = min(self.cycle, it.period)


def _elastic(mp: ModulePlan, latency_model: str = "tc") -> bool:
    """A module served by one machine of one configuration under TC: its windows are its batch
    intervals, ``b / f`` long and back to back, so a higher rate (more dummy load) shortens the interval
    to any common cycle >= d / c without lengthening its worst case (``d + b / f``)."""
    gs = mp.groups
    return (
        latency_model == "tc"
        and len(gs) == 1
        and gs[0].machines == 1
        and gs[0].rate_per_machine > 0
        and gs[0].duration_s > 0
    )


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
            elastic = ok and _elastic(plan.modules[s.module], model)
            allowance = allow[s.module] + max(0.0, bonus) if ok else 0.0
            it = _Item(s, ok, allowance, len(out), elastic)
            if elastic:
                _options(it, problem, plan.modules[s.module])
            out.append(it)
    return out


def _options(it: _Item, problem: ProblemSpec, mp: ModulePlan) -> None:
    """An elastic share's alternatives (Nexus picks each session's batch for the common duty cycle):
    every profiled configuration on its hardware; it must carry the module's rate (a dispatch-realised
    child: its required spread rate) and keep ``d + b / f`` at most what it is now."""
    s = it.share
    extra = mp.model_extra or {}
    floor = max(problem.modules[s.module].rate, float(extra.get("rate", 0.0) or 0.0))
    info = extra.get("dispatch")
    need = info.get("required_rate") if isinstance(info, dict) else None
    if isinstance(need, int | float) and isinstance(info, dict) and info.get("guaranteed", True):
        floor = max(floor, float(need))
    it.floor = floor
    it.limit = s.duration_s + s.batch / s.rate
    own = (s.batch, s.concurrency, s.duration_s)
    opts = {
        (e.batch, e.concurrency, e.duration_s)
        for e in problem.modules[s.module].profile
        if e.hardware == s.hardware
    }
    it.options = sorted(opts | {own}, key=lambda o: (o[2], o[0], o[1]))


# --------------------------------------------------------------------------- packing


def _rest_bounds(ordered: list[_Item]) -> list[tuple[float, float, float]]:
    """Per item of ``ordered``: the smallest busy fraction and duration and the largest allowance of the
    flexible items of its hardware from it on (itself included)."""
    out: list[tuple[float, float, float]] = [(math.inf, math.inf, -math.inf)] * len(ordered)
    seen: dict[str, tuple[float, float, float]] = {}
    for k in range(len(ordered) - 1, -1, -1):
        it = ordered[k]
        if not it.flexible:
            continue
        busy, dur, allow = seen.get(it.hw, (math.inf, math.inf, -math.inf))
        s = it.share
        seen[it.hw] = out[k] = (min(busy, s.busy), min(dur, s.duration_s), max(allow, it.allowance))
    return out


def _closed(b: _Bin, rest: tuple[float, float, float]) -> bool:
    """Whether FIFO bin ``b`` fits none of the items ``rest`` bounds (:func:`_rest_bounds`): each of
    :meth:`_Bin.fits`'s conditions fails for the bound, so for every such item (float addition and
    comparison are monotone). A bin's busy fraction and duration sum only grow and its headroom only
    shrinks, and the bounds only tighten from one item to the next, so a closed bin stays closed."""
    busy, dur, allow = rest
    return b.busy + busy > 1 + TOL or dur > b.headroom + TOL or b.dur > allow + TOL


def _best_fit(items: list[_Item], bins: list[_Bin]) -> None:
    """Best-fit decreasing: each item (largest busy first) joins the feasible FIFO bin it fills most.
    A bin no later item can join (:func:`_closed`) leaves the candidates; the others keep their order,
    so the choice (the first bin of the largest fill) is the one a scan of every bin makes."""
    by_hw: dict[str, list[_Bin]] = defaultdict(list)
    for b in bins:
        if b.items and b.items[0].flexible and not b.aligned:
            by_hw[b.hw].append(b)
    ordered = sorted(items, key=lambda i: (-i.share.busy, -i.share.duration_s, i.order))
    for it, rest in zip(ordered, _rest_bounds(ordered), strict=True):
        best: _Bin | None = None
        if it.flexible:
            live = by_hw[it.hw] = [b for b in by_hw[it.hw] if not _closed(b, rest)]
            for b in live:
                if b.fits(it) and (best is None or b.fill(it) > best.fill(it)):
                    best = b
        if best is None:
            best = _Bin(it.hw)
            bins.append(best)
            if it.flexible:
                by_hw[it.hw].append(best)
        best.add(it)


def _align(items: list[_Item], bins: list[_Bin], guard: float) -> list[_Item]:
    """Nexus's squishy bin packing of the elastic items into aligned bins (duty cycles): each item
    (largest busy first) joins the feasible aligned bin it fills most, else opens one. Bins left with
    one item are dissolved; returns the items that found no partner (and the non-elastic ones)."""
    by_hw: dict[str, list[_Bin]] = defaultdict(list)
    for b in bins:
        if b.aligned:
            by_hw[b.hw].append(b)
    rest = [it for it in items if not it.elastic]
    for it in sorted(
        (i for i in items if i.elastic), key=lambda i: (-i.share.busy, -i.share.duration_s, i.order)
    ):
        best: _Bin | None = None
        for b in by_hw[it.hw]:
            if b.fits(it) and (best is None or b.fill(it) > best.fill(it)):
                best = b
        if best is None:
            best = _Bin(it.hw, aligned=True, guard=guard)
            bins.append(best)
            by_hw[it.hw].append(best)
        best.add(it)
    for b in [b for b in bins if b.aligned and len(b.items) < 2]:
        if b.slot is None or not b.items:
            bins.remove(b)
            rest.extend(b.items)
        else:  # a previous slot keeps its one share, as a FIFO instance of its own
            b.aligned, b.cycle = False, math.inf
    rest.sort(key=lambda i: i.order)
    return rest


def _sticky_bins(
    previous: FleetPlan, items: list[_Item], align: bool, guard: float
) -> tuple[list[_Bin], list[_Item]]:
    """The previous instances, each keeping the shares whose key is unchanged (as long as they still fit
    together; an aligned instance stays aligned when ``align``); returns those bins and the items left to
    place."""
    free: dict[ShareKey, list[_Item]] = defaultdict(list)
    for it in items:
        free[it.share.key].append(it)
    for lst in free.values():
        lst.sort(key=lambda i: i.order)
    bins: list[_Bin] = []
    for inst in sorted(previous.instances, key=lambda i: _slot_order(i.slot)):
        b = _Bin(inst.hardware, slot=inst.slot, aligned=align and inst.aligned, guard=guard)
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
    old: dict[str, Counter[ShareKey]] = {}  # free previous slot -> its share keys
    holding: dict[tuple[str, ShareKey], list[str]] = defaultdict(list)  # (hardware, key) -> those slots
    if previous is not None:
        for inst in previous.instances:
            if inst.slot not in taken:
                old[inst.slot] = Counter(s.key for s in inst.shares)
                for k in old[inst.slot]:
                    holding[(inst.hardware, k)].append(inst.slot)
    pairs: list[tuple[int, str, int]] = []
    unnamed = [b for b in bins if b.slot is None]
    for bi, b in enumerate(unnamed):  # only the slots holding one of its keys (a new key matches none)
        keys = Counter(it.share.key for it in b.items)
        for slot in {slot for k in keys for slot in holding.get((b.hw, k), ())}:
            common = sum((keys & old[slot]).values())
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
        self.low: dict[str, int] = defaultdict(int)  # per hardware: every n below it is used
        for slot in reserved:
            hw, _, n = slot.rpartition("/")
            if n.isdigit():
                self.used[hw].add(int(n))

    def new(self, hw: str) -> str:
        used = self.used[hw]
        n = self.low[hw]  # names are never released, so the search goes on where the last one ended
        while n in used:
            n += 1
        used.add(n)
        self.low[hw] = n + 1
        return f"{hw}/{n}"


def _slot_order(slot: str) -> tuple[str, int]:
    hw, _, n = slot.rpartition("/")
    return (hw, int(n)) if n.isdigit() else (slot, -1)


def _instance(b: _Bin) -> Instance:
    assert b.slot is not None
    ordered = sorted(b.items, key=lambda i: i.order)
    total = sum(i.share.duration_s for i in ordered)
    if b.aligned and len(ordered) > 1:
        return _aligned_instance(b, ordered)
    shares = []
    for it in ordered:
        wait = total - it.share.duration_s if len(ordered) > 1 else 0.0
        shares.append(it.share.model_copy(update={"added_wait_s": wait, "fifo_wait_s": wait}))
    return Instance(slot=b.slot, hardware=b.hw, shares=shares)


def _aligned_instance(b: _Bin, ordered: list[_Item]) -> Instance:
    """Shares taking turns in one duty cycle: share k's batches are ready at
    ``sum_{j<k} (d_j + guard) + n * cycle``; every share runs one batch per cycle in its chosen
    configuration (rate ``b / cycle``, the extra as dummy load), so no batch finds the device busy."""
    assert b.slot is not None
    cycle = b.cycle
    total = sum(b.choice[it.order][2] for it in ordered)
    shares = []
    offset = 0.0
    for it in ordered:
        batch, conc, dur = b.choice[it.order]
        rate = batch / cycle
        shares.append(
            it.share.model_copy(
                update={
                    "batch": batch,
                    "concurrency": conc,
                    "duration_s": dur,
                    "rate": rate,
                    "occupancy": dur / (conc * cycle),
                    "busy": dur / cycle,
                    "added_wait_s": 0.0,
                    "fifo_wait_s": total - dur,
                    "phase_s": offset,
                }
            )
        )
        offset += dur + b.guard
    return Instance(slot=b.slot, hardware=b.hw, shares=shares, cycle_s=cycle)


def pack(
    apps: Mapping[str, tuple[ProblemSpec, Plan]],
    *,
    previous: FleetPlan | None = None,
    repack_threshold: float = REPACK_THRESHOLD,
    align: bool = False,
    guard_s: float = ALIGN_GUARD_S,
) -> FleetPlan:
    """Place every planned machine of every app on a whole instance of its hardware type.

    Co-locatable partial shares (:func:`colocatable_groups`) share instances when the busy fractions sum
    to at most 1 and every share's added wait stays within its module's allowance (:func:`allowances`);
    every other share gets its own instance. With ``align``, modules served by one machine of one
    configuration are first packed into *aligned* instances (duty cycles, docs/packing.md): the shares
    of an instance run one batch each per common cycle (the smallest of their batch intervals; their
    rates are raised to ``b / cycle``, the extra as dummy load) at phases chosen here, so that
    ``sum (d + guard_s) <= cycle`` and no share waits for another; the fleet's shares then differ from
    the plans in rate and phase, and :func:`apply_phases` gives the plans that match. ``previous`` (the
    last epoch's fleet) keeps unchanged shares on their slots so workers do not reload models, unless
    packing afresh bills ``repack_threshold`` less. Deterministic for equal inputs.
    """
    if guard_s < 0:
        raise ValueError(f"guard_s must be >= 0, got {guard_s}")
    prices = _prices(apps)
    items = _items(apps)
    if not align:
        for it in items:
            it.elastic = False
    fresh: list[_Bin] = []
    _best_fit(_align(items, fresh, guard_s), fresh)
    bins = fresh
    if previous is not None:
        sticky, rest = _sticky_bins(previous, items, align, guard_s)
        _best_fit(_align(rest, sticky, guard_s), sticky)
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
        occupancy_per_hour=sum(prices[i.hardware] * i.occupancy for i in instances),
        dedicated_per_hour=sum(prices[it.hw] for it in items),
    )


def apply_phases(apps: Mapping[str, tuple[ProblemSpec, Plan]], fleet: FleetPlan) -> dict[str, Plan]:
    """The plans ``fleet`` runs: every module on an aligned instance with its share's configuration and
    rate (the extra as dummy load), ``schedule_phase_s`` (the phase the front's routing and the workers
    honour: ``planner.dispatch.schedule_origin``) and ``duty_cycle_s``; other plans unchanged. The
    worst-case figures are kept (the packer never lets ``d + b / f`` grow)."""
    aligned = {
        (s.app, s.module): (s, inst.cycle_s)
        for inst in fleet.instances
        if inst.aligned and inst.cycle_s is not None
        for s in inst.shares
    }
    out: dict[str, Plan] = {}
    for name in sorted(apps):
        problem, plan = apps[name]
        mine = {m: v for (a, m), v in aligned.items() if a == name}
        if not mine:
            out[name] = plan
            continue
        modules = dict(plan.modules)
        for m, (s, cycle) in mine.items():
            mp = modules[m]
            g = mp.groups[0].model_copy(
                update={
                    "batch": s.batch,
                    "concurrency": s.concurrency,
                    "duration_s": s.duration_s,
                    "rate_per_machine": s.rate,
                }
            )
            price = problem.hardware[g.hardware].price_per_hour
            modules[m] = mp.model_copy(
                update={
                    "groups": [g],
                    "dummy_rate": max(0.0, s.rate - problem.modules[m].rate),
                    "occupancy_per_hour": price * s.occupancy,
                    "schedule_phase_s": s.phase_s,
                    "duty_cycle_s": cycle,
                }
            )
        occ = sum(
            g.machines
            * problem.hardware[g.hardware].price_per_hour
            * g.rate_per_machine
            * g.duration_s
            / (g.concurrency * g.batch)
            for mp in modules.values()
            for g in mp.groups
        )
        out[name] = plan.model_copy(update={"modules": modules, "cost_per_hour": occ})
    return out


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
    turns_ok = _check_turns(inst, apps, errors) if inst.aligned else False
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
            floor = 0.0 if turns_ok else total - s.duration_s
            if wait < floor - 1e-9:
                errors.append(
                    f"{_name(s)} on {inst.slot}: added wait {wait:.6f} s below the others' "
                    f"durations {floor:.6f} s"
                )
                wait = floor
        k = (s.app, s.module)
        own = base if base is not None else mp.worst_case_latency_s
        worst[k] = max(worst.get(k, 0.0), own + wait)


def _check_turns(inst: Instance, apps: Mapping[str, tuple[ProblemSpec, Plan]], errors: list[str]) -> bool:
    """An aligned instance: every share is its module's only machine, runs one batch per cycle (rate
    ``b / cycle``), its plan carries the phase and cycle the data plane honours, and the turns
    ``[phase, phase + d)`` (mod the cycle) do not overlap, so no batch waits. Also the FIFO bound
    (``fifo_wait_s``) for when the phases are not honoured. True when all of it holds."""
    cycle = inst.cycle_s
    assert cycle is not None
    ok = True
    total = sum(s.duration_s for s in inst.shares)
    for s in inst.shares:
        mp = apps[s.app][1].modules.get(s.module) if s.app in apps else None
        if mp is None:
            return False
        extra = mp.model_extra or {}
        phase, plan_cycle = extra.get("schedule_phase_s"), extra.get("duty_cycle_s")
        problems = []
        if not _elastic(mp, _latency_model(apps[s.app][1])):
            problems.append("its module is not one machine of one configuration")
        if s.phase_s is None or not isinstance(phase, int | float) or abs(phase - s.phase_s) > 1e-9:
            problems.append(f"the plan's schedule phase {phase} is not the share's {s.phase_s}")
        if not isinstance(plan_cycle, int | float) or not math.isclose(plan_cycle, cycle, rel_tol=1e-9):
            problems.append(f"the plan's duty cycle {plan_cycle} is not the instance's {cycle}")
        if s.rate <= 0 or not math.isclose(s.batch / s.rate, cycle, rel_tol=1e-9):
            problems.append(f"batch interval {s.batch / max(s.rate, 1e-300):.6g} s is not the cycle")
        if s.fifo_wait_s < total - s.duration_s - 1e-9:
            problems.append(f"fifo_wait_s {s.fifo_wait_s:.6f} s below the others' durations")
        for msg in problems:
            errors.append(f"{_name(s)} on aligned {inst.slot}: {msg}")
        ok = ok and not problems
    turns = sorted(((s.phase_s or 0.0) % cycle, s.duration_s, _name(s)) for s in inst.shares)
    for (x, d, who), (y, _, nxt) in zip(
        turns, [*turns[1:], (turns[0][0] + cycle, 0.0, turns[0][2])], strict=True
    ):
        if x + d > y + 1e-9:
            errors.append(
                f"{inst.slot}: {who}'s turn ends at {x + d:.6f} s, after {nxt}'s starts at {y:.6f} s"
            )
            ok = False
    return ok


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
    honour_phases: bool = True,
) -> list[ShareReplay]:
    """Replay one instance: each share's batches become ready at its machine's window ends in its module's
    dispatch schedule (:func:`planner.dispatch.build_schedule`), shifted by the share's phase; the device
    runs them one at a time in ready order, each for its duration (the worst case of the worker's device,
    which lets batches with concurrency > 1 overlap). ``periods`` of the longest schedule period are
    replayed. Phases: ``phases`` if given; else, on an aligned instance with ``honour_phases``, the
    packer's (:func:`aligned_phases`), and the bound is the share's ``added_wait_s`` (0); else random in
    ``[0, period)`` (independent schedule origins). Without the packer's phases the bound is the FIFO
    one, ``fifo_wait_s`` (the sum of the other shares' durations)."""
    import numpy as np

    from planner.dispatch import build_schedule

    own = phases is None and instance.aligned and honour_phases
    if own:
        phases = aligned_phases(instance)
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
        w = sched.windows
        mine = (w.group == s.group) & (w.machine == s.machine)
        ends = w.end[mine]
        lengths = w.end[mine] - w.start[mine]
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
        allowed = s.added_wait_s if own or not instance.aligned else s.fifo_wait_s
        out.append(
            ShareReplay(
                share=_name(s),
                batches=int(mask.sum()),
                measured_worst_s=float(np.max(window[mask] + wait[mask] + dur[mask])),
                bound_s=base + allowed,
                max_wait_s=float(np.max(wait[mask])),
                added_wait_s=allowed,
            )
        )
    return out


def aligned_phases(instance: Instance) -> dict[tuple[str, str, int, int], float]:
    """The packer's phases of an aligned instance, for :func:`simulate_instance`: each share's module
    schedule starts at its ``phase_s`` (a module with one machine has its window ends at multiples of
    its period, so its batches are ready at ``phase_s + k * cycle_s``)."""
    return {s.ident: s.phase_s for s in instance.shares if s.phase_s is not None}


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
        w = sched.windows
        firsts[s.ident] = float(w.end[(w.group == s.group) & (w.machine == s.machine)].min())
    target = instance.shares[victim]
    at = 10.0 + firsts[target.ident]  # victim's first batch ready at t = 10 + its first end
    out = {target.ident: 10.0}
    for k, s in enumerate(x for j, x in enumerate(instance.shares) if j != victim):
        out[s.ident] = at - 1e-7 * (k + 1) - firsts[s.ident]
    return out
