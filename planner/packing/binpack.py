"""Best-fit decreasing packing of the shares onto instances, with the previous epoch's instances kept and
aligned duty cycles (Nexus's squishy bin packing)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from planner.packing.models import TOL, FleetPlan, Instance, PackingError, Share, ShareKey
from planner.packing.shares import allowances, colocatable_groups, is_elastic, plan_latency_model, plan_shares

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from planner.models import ModulePlan, Plan, ProblemSpec

__all__ = ["ALIGN_GUARD_S", "REPACK_THRESHOLD", "pack"]

#: Keep the previous epoch's instances unless a fresh packing bills this fraction less.
REPACK_THRESHOLD = 0.03

#: Idle time after every share's turn in an aligned duty cycle (s): batch release jitter it absorbs.
ALIGN_GUARD_S = 1e-4

Option = tuple[int, int, float]  # (batch, concurrency, duration_s): one configuration on the share's hardware


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


def _items(apps: Mapping[str, tuple[ProblemSpec, Plan]]) -> list[_Item]:
    out: list[_Item] = []
    for name in sorted(apps):
        problem, plan = apps[name]
        model = plan_latency_model(plan)
        flex = {m: colocatable_groups(mp, model) for m, mp in plan.modules.items()}
        allow = allowances(problem, plan, {m for m, g in flex.items() if g})
        for s in plan_shares(name, plan):
            base = flex[s.module].get(s.group)
            ok = base is not None and s.busy < 1 - 1e-6
            bonus = plan.modules[s.module].worst_case_latency_s - base if base is not None else 0.0
            elastic = ok and is_elastic(plan.modules[s.module], model)
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
    profile = [e for e in problem.modules[s.module].profile if e.hardware == s.hardware]
    # device time only: the limit and the options leave out the latency-only overhead, so only options
    # with the share's own overhead compare (o + d + cycle <= o + limit)
    hop = next((e.overhead_s for e in profile if (e.batch, e.concurrency) == (s.batch, s.concurrency)), 0.0)
    opts = {(e.batch, e.concurrency, e.duration_s) for e in profile if e.overhead_s == hop}
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
