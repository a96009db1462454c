"""Replay of one instance: its shares' batches run one at a time in ready order, against the bound."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from planner.packing.phases import aligned_phases
from planner.packing.shares import colocatable_groups, plan_latency_model, share_name

if TYPE_CHECKING:
    from collections.abc import Mapping

    from planner.models import Plan, ProblemSpec
    from planner.packing.models import Instance

__all__ = ["ShareReplay", "simulate_instance"]


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
    # numpy and the dispatch schedules load here: the front and the workers import planner.packing for
    # its models at cold start, and never replay.
    import numpy as np

    from planner.dispatch import build_schedule  # cold start: numpy (above)

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
        base = colocatable_groups(plan.modules[s.module], plan_latency_model(plan)).get(
            s.group, plan.modules[s.module].worst_case_latency_s
        )
        allowed = s.added_wait_s if own or not instance.aligned else s.fifo_wait_s
        out.append(
            ShareReplay(
                share=share_name(s),
                batches=int(mask.sum()),
                measured_worst_s=float(np.max(window[mask] + wait[mask] + dur[mask])),
                bound_s=base + allowed,
                max_wait_s=float(np.max(wait[mask])),
                added_wait_s=allowed,
            )
        )
    return out
