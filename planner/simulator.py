"""Discrete-event simulation of a plan's dispatch and machines over a whole application DAG (pure numpy).

The simulation is vectorised per module and per chunk of simulated time:

- arrivals of a root module are generated (uniform, Poisson or bursty on/off MMPP) at the module's real
  rate (the problem's rate, dummy load excluded); a parent's completed requests spawn the children's
  requests at the children's arrival times, ``rate(child) / sum(rate(parents))`` per completed request
  (deterministic fractional accumulation, so a child receives exactly its problem rate);
- children of one parent batch appear at once; with TC the emitting worker spreads them (child ``k`` at
  ``completion + k / rho``, ``rho`` the plan's spread rate for that parent: each parent of a join has
  its own, docs/dispatch.md);
- TC dispatch: each arrival finds its window with ``searchsorted`` on the schedule's offsets
  (:mod:`planner.dispatch`); the requests of a window form one batch that is ready at the window's end;
- RR dispatch (the baselines): request ``j`` goes to machine ``pattern[j % len(pattern)]`` (smooth weighted
  round robin) and each machine closes a batch when ``b`` of its own requests have arrived;
- batches run on the machine's ``concurrency`` slots, batch ``k`` of a machine on slot ``k mod c``; a slot
  runs its batches in order: ``start = max(ready, slot free)``, computed for all slots at once with a
  segmented ``maximum.accumulate`` (Lindley's recursion). A batch with more than ``b`` requests (possible
  with Poisson or bursty arrivals) runs as ``ceil(n / b)`` batches back to back on its slot; an empty
  window runs nothing. Durations come from the plan's ``MachineGroup.duration_s``, times an optional
  uniform factor in ``[1 - jitter, 1 + jitter]``;
- the hop that delivers a module's requests (``MachineGroup.overhead_s``: queue send, delivery, receive)
  is a constant delay before a request reaches its machine: a batch is ready at its window's end (RR: at
  its ``b``-th request) plus the hop of the machine's group. It occupies no slot: the next batch may
  start while one is in flight, as the worker overlaps receiving with the device. With ``hop_samples``
  (measured deliveries) each request's hop is drawn from them instead, while the plan keeps the hop it
  was made with. TC: the worker closes a window a fixed delay after its end (its group's planned hop,
  or ``close_delay_s``); what was delivered by then is the batch, each request delivered later is a
  batch of its own, ready on delivery (it costs the machine a whole batch's time). RR: a batch waits
  for its slowest request (ready at its ``b``-th request plus the largest of its requests' draws).

Chunks: a module processes the arrivals before the start of the window that contains the chunk's end and
keeps the rest, so a batch is never split; every completion before the chunk's end has then been produced
by every parent, so children see all their earlier arrivals. Latency percentiles come from log-spaced
histograms (0.1 % resolution); maxima are exact. End-to-end latency is measured per root-to-leaf path
instance: a leaf request's completion minus the arrival time of the frame (root request) it descends from.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING, Literal

import numpy as np

from planner.dispatch import (
    DispatchSchedule,
    build_schedule,
    planned_spread_rate,
    root_window_caps,
    rr_pattern,
)
from planner.robust import planned_spread_rates
from planner.simstats import (
    Admission,
    Arrivals,
    Dispatch,
    EndToEndStats,
    LatencyStats,
    ModuleStats,
    SimulationReport,
    _Hist,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from planner.models import ModulePlan, Plan, ProblemSpec

__all__ = ["EndToEndStats", "LatencyStats", "ModuleStats", "SimulationReport", "simulate"]

#: Windows the front looks at after a frame's arrival window (``AdmissionConfig.max_spill_slots``).
MAX_SPILL_SLOTS = 64

#: Simulated seconds per chunk (bounds memory: rate * chunk requests per module in flight).
CHUNK_S = 5.0
#: Bursty arrivals: two-state MMPP with these rate multipliers and mean sojourn (s) in each state.
BURST_HIGH, BURST_LOW, BURST_SOJOURN_S = 1.5, 0.5, 0.5
_TOL = 1e-9


# --------------------------------------------------------------------------- arrivals


class _Source:
    """Arrival process of a root module, generated chunk by chunk."""

    def __init__(self, rate: float, kind: Arrivals, rng: np.random.Generator) -> None:
        self.rate = rate
        self.kind = kind
        self.rng = rng
        self.last = 0.0
        self.high = True
        self.switch = float(rng.exponential(BURST_SOJOURN_S)) if kind == "bursty" else math.inf

    def _poisson(self, t0: float, t1: float, rate: float) -> np.ndarray:
        out: list[np.ndarray] = []
        t = t0
        while True:
            n = int(rate * (t1 - t) + 6 * math.sqrt(rate * (t1 - t) + 1) + 16)
            times = t + np.cumsum(self.rng.exponential(1.0 / rate, n))
            out.append(times[times < t1])
            if times[-1] >= t1:
                break
            t = float(times[-1])
        return np.concatenate(out)

    def generate(self, t0: float, t1: float) -> np.ndarray:
        if self.kind == "uniform":  # mid-lattice phase: no arrival falls on a window boundary
            k0 = math.ceil(t0 * self.rate - 0.5)
            k1 = math.ceil(t1 * self.rate - 0.5)
            return (np.arange(k0, k1, dtype=np.float64) + 0.5) / self.rate
        if self.kind == "poisson":
            return self._poisson(t0, t1, self.rate)
        parts: list[np.ndarray] = []
        t = t0
        while t < t1:
            seg_end = min(self.switch, t1)
            rate = self.rate * (BURST_HIGH if self.high else BURST_LOW)
            parts.append(self._poisson(t, seg_end, rate))
            t = seg_end
            if self.switch <= t1:
                self.high = not self.high
                self.switch += float(self.rng.exponential(BURST_SOJOURN_S))
        return np.concatenate(parts) if parts else np.empty(0)


class _FrontAdmission:
    """The front's batch-slot admission (``front/admission.py``, ``Admission._find_slot``) for
    one root module, in one process: each window takes at most ``caps[k]`` arrivals; an arrival whose
    window is full spills into the next windows (up to :data:`MAX_SPILL_SLOTS`) while a window's bound
    (its end + steady-state wait + duration + hop + the planned worst case of the modules below) meets the
    arrival's deadline, else it is shed. The GCRA and per-key limits are left out (they shed only above
    the planned rate). ``instances`` > 1 plays that many front instances that each count only their
    own frames (a Lambda front without the shared counts, ``core/adapters/slots.py``): an arrival
    goes to one of them at random (``rng``) and is checked against that instance's counts alone."""

    def __init__(
        self,
        module: _Module,
        caps: list[int],
        tail_s: float,
        slo_s: float,
        instances: int = 1,
        rng: np.random.Generator | None = None,
    ) -> None:
        w = module.schedule.windows
        self.period = module.period
        ends = np.asarray(w.end, dtype=np.float64)
        self.ends = ends.tolist()
        self.mid = ((np.asarray(w.start, dtype=np.float64) + ends) / 2).tolist()
        dur = module.dur_of_machine[module.win_machine] + module.hop_of_machine[module.win_machine]
        self.bound = (ends + np.asarray(w.wait, dtype=np.float64) + dur).tolist()
        self.caps = caps
        self.tail_s = tail_s
        self.slo_s = slo_s
        self.instances = [dict[int, int]() for _ in range(max(1, instances))]
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.offered = 0
        self.shed = 0

    def admit(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(dispatch times, admitted mask) of arrivals ``t`` (ascending, after every earlier call's)."""
        k_all = len(self.ends)
        v = t.copy()
        keep = np.zeros(len(t), dtype=bool)
        n_inst = len(self.instances)
        which = self.rng.integers(n_inst, size=len(t)).tolist() if n_inst > 1 else [0] * len(t)
        for i, ti in enumerate(t.tolist()):
            counts = self.instances[which[i]]
            cyc = math.floor(ti / self.period)
            k = min(bisect.bisect_right(self.ends, ti - cyc * self.period), k_all - 1)
            bid = cyc * k_all + k
            deadline = ti + self.slo_s + _TOL
            for hop in range(MAX_SPILL_SLOTS + 1):
                c, kk = divmod(bid, k_all)
                if c * self.period + self.bound[kk] + self.tail_s > deadline:
                    break
                if counts.get(bid, 0) < self.caps[kk]:
                    counts[bid] = counts.get(bid, 0) + 1
                    keep[i] = True
                    if hop:
                        v[i] = c * self.period + self.mid[kk]
                    break
                bid += 1
        self.offered += len(t)
        self.shed += int(len(t) - keep.sum())
        for j, counts in enumerate(self.instances):
            if len(counts) > 4 * k_all + 1024:  # forget windows well behind the last arrival
                last = (math.floor(float(t[-1]) / self.period) - 1) * k_all
                self.instances[j] = {b: n for b, n in counts.items() if b >= last}
        return v, keep


def _tails(problem: ProblemSpec, plan: Plan, modules: dict[str, _Module]) -> dict[str, float]:
    """Worst case of the modules below each module (longest path), as the front computes it
    (``front/admission.py`` ``_tails``): per module the larger of the plan's figure and its
    schedule's bound."""
    kids = problem.children()
    wcl = {
        m: max(plan.modules[m].worst_case_latency_s, float(mod.schedule.worst_case_latency_s))
        for m, mod in modules.items()
    }
    memo: dict[str, float] = {}

    def tail(m: str) -> float:
        if m not in memo:
            memo[m] = max((wcl[c] + tail(c) for c in kids[m]), default=0.0)
        return memo[m]

    return {m: tail(m) for m in problem.modules}


# --------------------------------------------------------------------------- machines


class _Machines:
    """Slot state of a module's machines (global machine index = group offset + machine)."""

    def __init__(self, module_plan: ModulePlan) -> None:
        gs = module_plan.groups
        self.offset = np.cumsum([0] + [g.machines for g in gs])[:-1]
        conc = np.concatenate([np.full(g.machines, g.concurrency) for g in gs])
        self.conc = conc.astype(np.int64)
        self.chain_base = np.concatenate(([0], np.cumsum(self.conc)[:-1])).astype(np.int64)
        self.free = np.full(int(self.conc.sum()), -np.inf)
        self.done = np.zeros(len(conc), dtype=np.int64)  # batches started per machine

    def run(self, mach: np.ndarray, ready: np.ndarray, dur: np.ndarray) -> np.ndarray:
        """Start times of batches (machine, ready, duration); batch k of a machine runs on slot k mod c."""
        n = len(mach)
        if n == 0:
            return np.empty(0)
        order = np.lexsort((ready, mach))
        m, r = mach[order], ready[order]
        first_of_m = np.r_[True, m[1:] != m[:-1]]
        idx = np.arange(n)
        rank = idx - np.maximum.accumulate(np.where(first_of_m, idx, 0))
        chain = self.chain_base[m] + (self.done[m] + rank) % self.conc[m]
        self.done += np.bincount(m, minlength=len(self.done))
        order2 = np.lexsort((r, chain))
        ch, r2, d2 = chain[order2], r[order2], dur[order[order2]]
        t0 = float(r2.min())
        seg = np.r_[True, ch[1:] != ch[:-1]]
        seg_id = np.cumsum(seg) - 1
        cum = np.cumsum(d2)
        base = (cum - d2)[seg]
        s_incl = cum - base[seg_id]
        v = (r2 - t0) - (s_incl - d2)
        v[seg] = np.maximum(v[seg], self.free[ch[seg]] - t0)
        lo = float(v.min())
        span = float(v.max()) - lo + 1.0
        shifted = (v - lo) + seg_id * span
        running = np.maximum.accumulate(shifted) - seg_id * span + lo
        completion = s_incl + running + t0
        last = np.r_[seg[1:], True]
        self.free[ch[last]] = completion[last]
        start_sorted = completion - d2
        start = np.empty(n)
        start[order[order2]] = start_sorted
        return start


# --------------------------------------------------------------------------- modules


class _Module:
    """One module's dispatch, machines and statistics."""

    def __init__(
        self,
        name: str,
        plan: ModulePlan,
        *,
        dispatch: Dispatch,
        jitter: float,
        rng: np.random.Generator,
        prices: dict[str, float],
        hop_samples: np.ndarray | None = None,
        close_delay_s: float | None = None,
        late_policy: Literal["own", "next"] = "own",
    ) -> None:
        self.name = name
        self.late_policy = late_policy  # with hop_samples: a late request's own batch, or a later window
        self.hop_samples = hop_samples  # sorted measured hops (s), or None: the groups' constant hop
        self.close_delay_s = close_delay_s  # with hop_samples: the worker's close after a window's end
        self.late = 0  # requests delivered after their window closed (hop_samples)
        self.plan = plan
        self.dispatch = dispatch
        self.jitter = jitter
        self.rng = rng
        self.machines = _Machines(plan)
        self.schedule: DispatchSchedule = build_schedule(name, plan, prices)
        gs = plan.groups
        self.batch_of_machine = np.concatenate([np.full(g.machines, g.batch) for g in gs]).astype(np.int64)
        self.dur_of_machine = np.concatenate([np.full(g.machines, g.duration_s) for g in gs])
        self.hop_of_machine = np.concatenate([np.full(g.machines, g.overhead_s) for g in gs])
        self.hops = bool(self.hop_of_machine.any())
        if dispatch == "tc":
            w = self.schedule.windows
            self.period = self.schedule.period_s
            self.ends = w.end
            self.starts = w.start
            self.win_machine = np.asarray(self.machines.offset, dtype=np.int64)[w.group] + w.machine
        else:
            pat = rr_pattern(plan)
            self.pattern = np.array([self.machines.offset[g] + m for g, m in pat], dtype=np.int64)
            self.seen = 0  # requests dispatched so far
            self.rr_done = np.zeros(len(self.batch_of_machine), dtype=np.int64)  # requests in closed batches
            self.held_m = np.empty(0, dtype=np.int64)  # requests of open batches: machine, time, origin
            self.held_t = np.empty(0)
            self.held_o = np.empty(0)
        self.pending_t = np.empty(0)
        self.pending_v = np.empty(0)
        self.pending_o = np.empty(0)
        self.latency = _Hist()
        self.wait = _Hist()
        self.requests = 0
        self.batches = 0
        self.overflow = 0
        self.fill_sum = 0.0
        self.last_arrival = 0.0

    def _durations(self, mach: np.ndarray, count: np.ndarray) -> np.ndarray:
        subs = np.ceil(count / self.batch_of_machine[mach])
        self.overflow += int(np.sum(subs > 1))
        dur: np.ndarray = self.dur_of_machine[mach] * subs
        if self.jitter > 0:
            dur = dur * self.rng.uniform(1 - self.jitter, 1 + self.jitter, len(dur))
        return dur

    def _cut(self, horizon: float) -> float:
        if math.isinf(horizon):
            return horizon
        if self.dispatch == "rr":
            return horizon
        cyc = math.floor(horizon / self.period)
        k = int(np.searchsorted(self.ends, horizon - cyc * self.period, side="right"))
        if k >= len(self.ends):
            return (cyc + 1) * self.period
        return cyc * self.period + float(self.starts[k])

    def step(
        self, t: np.ndarray, v: np.ndarray, origin: np.ndarray, horizon: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Process requests (arrival ``t``, dispatch time ``v >= t``, frame ``origin``) whose dispatch time
        is before the horizon's window; return (completion, origin) of the processed requests."""
        t = np.concatenate((self.pending_t, t))
        v = np.concatenate((self.pending_v, v))
        origin = np.concatenate((self.pending_o, origin))
        order = np.argsort(v, kind="stable")
        t, v, origin = t[order], v[order], origin[order]
        cut = self._cut(horizon)
        n = int(np.searchsorted(v, cut, side="left"))
        self.pending_t, self.pending_v, self.pending_o = t[n:], v[n:], origin[n:]
        t, v, origin = t[:n], v[:n], origin[:n]
        if n == 0 and not (self.dispatch == "rr" and math.isinf(horizon)):
            return np.empty(0), np.empty(0)
        if n:
            self.last_arrival = max(self.last_arrival, float(v[-1]))
        if self.dispatch == "tc":
            return self._tc(t, v, origin)
        return self._rr(t, origin, final=math.isinf(horizon))

    def _tc(self, t: np.ndarray, v: np.ndarray, origin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cyc = np.floor(v / self.period)
        k = np.minimum(np.searchsorted(self.ends, v - cyc * self.period, side="right"), len(self.ends) - 1)
        bid = cyc.astype(np.int64) * len(self.ends) + k
        first = np.flatnonzero(np.r_[True, bid[1:] != bid[:-1]])
        count = np.diff(np.r_[first, len(t)])
        if self.hop_samples is not None:
            return self._tc_drawn_hops(
                t, v, origin, bid, cyc * self.period + self.ends[k], self.win_machine[k]
            )
        kb = k[first]
        ready = cyc[first] * self.period + self.ends[kb]
        mach = self.win_machine[kb]
        return self._execute(t, origin, mach, ready, count)

    def _tc_drawn_hops(
        self,
        t: np.ndarray,
        v: np.ndarray,
        origin: np.ndarray,
        bid: np.ndarray,
        end: np.ndarray,
        mach: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """TC batches as the worker forms them when every request's hop is drawn (``hop_samples``): the
        worker closes a window ``close_delay_s`` after its end (None: the group's planned hop, which the
        plan's worst case already counts); the requests delivered by then are its batch, ready at the
        close; each request delivered later is a batch of its own, ready on delivery, and takes a whole
        batch's device time (conservative: it occupies the machine as a batch of ``b`` would)."""
        delay = self.hop_of_machine[mach] if self.close_delay_s is None else self.close_delay_s
        close = end + delay
        delivered = v + self._draws(len(v))
        late = delivered > close
        if self.late_policy == "next":
            # a late request joins the same window one or more periods on (the same machine), the
            # first whose close it makes: the schedule's batches stay the only ones that run
            cycles = np.where(late, np.ceil((delivered - close) / self.period - 1e-12), 0.0)
            self.late += int(np.count_nonzero(late))
            bid2 = bid + cycles.astype(np.int64) * len(self.ends)
            order = np.argsort(bid2, kind="stable")
            b2 = bid2[order]
            first = np.flatnonzero(np.r_[True, b2[1:] != b2[:-1]])
            count = np.diff(np.r_[first, len(b2)]).astype(np.int64)
            ready = (close + cycles * self.period)[order][first]
            return self._execute(
                t[order], origin[order], mach[order][first].astype(np.int64), ready, count, hops_in_ready=True
            )
        on_idx = np.flatnonzero(~late)
        late_idx = np.flatnonzero(late)
        b_on = bid[on_idx]
        first = np.flatnonzero(np.r_[True, b_on[1:] != b_on[:-1]]) if b_on.size else np.empty(0, np.int64)
        count_on = np.diff(np.r_[first, b_on.size]).astype(np.int64)
        order = np.r_[on_idx, late_idx]
        ready = np.r_[close[on_idx[first]], delivered[late_idx]]
        machines = np.r_[mach[on_idx[first]], mach[late_idx]].astype(np.int64)
        count = np.r_[count_on, np.ones(late_idx.size, dtype=np.int64)]
        self.late += int(late_idx.size)
        return self._execute(t[order], origin[order], machines, ready, count, hops_in_ready=True)

    def _rr(self, t: np.ndarray, origin: np.ndarray, final: bool) -> tuple[np.ndarray, np.ndarray]:
        new_m = self.pattern[(self.seen + np.arange(len(t))) % len(self.pattern)]
        self.seen += len(t)
        # requests held in open batches (assigned earlier) join the new ones; sort by (machine, time)
        m_all = np.concatenate((self.held_m, new_m))
        t_all = np.concatenate((self.held_t, t))
        o_all = np.concatenate((self.held_o, origin))
        order = np.lexsort((t_all, m_all))
        m, ts, og = m_all[order], t_all[order], o_all[order]
        first_of_m = np.r_[True, m[1:] != m[:-1]]
        idx = np.arange(len(m))
        rank = idx - np.maximum.accumulate(np.where(first_of_m, idx, 0))
        b = self.batch_of_machine[m]
        local = self.rr_done[m] + rank
        per_m = np.bincount(m, minlength=len(self.rr_done))
        total = self.rr_done + per_m
        batch_no = local // b
        closed = (batch_no + 1) * b <= total[m]
        if final:
            closed[:] = True
        keep = ~closed
        self.held_m, self.held_t, self.held_o = m[keep], ts[keep], og[keep]
        self.rr_done += np.bincount(m[closed], minlength=len(self.rr_done))
        m, ts, og, batch_no = m[closed], ts[closed], og[closed], batch_no[closed]
        if len(m) == 0:
            return np.empty(0), np.empty(0)
        key = m * (int(batch_no.max()) + 1) + batch_no
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        count = np.diff(np.r_[first, len(m)])
        last = np.r_[first[1:], len(m)] - 1
        ready = ts[last]  # a batch closes at its b-th request
        return self._execute(ts, og, m[first], ready, count)

    def _execute(
        self,
        t: np.ndarray,
        origin: np.ndarray,
        mach: np.ndarray,
        ready: np.ndarray,
        count: np.ndarray,
        hops_in_ready: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        dur = self._durations(mach, count)
        if self.hop_samples is not None and not hops_in_ready:  # RR: a batch waits for its slowest request
            ready = ready + self._slowest_hops(count)
        elif (
            self.hops and not hops_in_ready
        ):  # the batch's last request reaches the machine one hop after the batch closes
            ready = ready + self.hop_of_machine[mach]
        start = self.machines.run(mach, ready, dur)
        completion = start + dur
        done = np.repeat(completion, count)
        self.latency.add(done - t)
        self.wait.add(np.maximum(start - ready, 0.0), weights=count)
        self.requests += len(t)
        self.batches += len(count)
        self.fill_sum += float(np.sum(count / self.batch_of_machine[mach]))
        return done, origin

    def _draws(self, n: int) -> np.ndarray:
        samples = self.hop_samples
        assert samples is not None
        index = self.rng.integers(0, len(samples), n)
        drawn: np.ndarray = samples[index]
        return drawn

    def _slowest_hops(self, count: np.ndarray) -> np.ndarray:
        """Per batch of ``count`` requests, the largest of ``count`` hops drawn from the samples: the
        maximum of n draws is the empirical quantile at ``U ** (1 / n)``, U uniform."""
        samples = self.hop_samples
        assert samples is not None
        u = self.rng.random(len(count)) ** (1.0 / np.maximum(count, 1))
        index = np.minimum((u * len(samples)).astype(np.int64), len(samples) - 1)
        hops: np.ndarray = samples[index]
        return hops

    def windows_elapsed(self) -> int:
        if self.dispatch == "rr":
            return self.batches
        cyc = math.floor(self.last_arrival / self.period)
        k = int(np.searchsorted(self.ends, self.last_arrival - cyc * self.period, side="right"))
        return cyc * len(self.ends) + k + 1


# --------------------------------------------------------------------------- driver


def _spawn(
    completion: np.ndarray, origin: np.ndarray, ratio: float, acc: list[float], spread_rate: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Children of completed requests (in completion order): ``ratio`` per request, by accumulation.
    Returns (arrival, dispatch time, origin). With ``spread_rate`` > 0 the children that arrive at one
    instant (one parent batch) are dispatched as if spaced ``1 / spread_rate`` apart."""
    order = np.argsort(completion, kind="stable")
    c, o = completion[order], origin[order]
    cum = acc[0] + ratio * np.arange(1, len(c) + 1)
    counts = np.floor(cum + _TOL) - np.floor(np.r_[acc[0], cum[:-1]] + _TOL)
    if len(c):
        acc[0] = float(cum[-1])
    reps = counts.astype(np.int64)
    t, o = np.repeat(c, reps), np.repeat(o, reps)
    if spread_rate <= 0 or len(t) == 0:
        return t, t.copy(), o
    idx = np.arange(len(t))
    run_start = np.maximum.accumulate(np.where(np.r_[True, t[1:] != t[:-1]], idx, 0))
    return t, t + (idx - run_start) / spread_rate, o


def _spread_rate(module_plan: ModulePlan, parent: str, module: _Module) -> float:
    """Rate at which ``parent``'s batches spread their children of this module: the plan's per-parent
    rate (``dispatch.spread_rates``, a join's share), else its one ``dispatch.spread_rate``, else the
    schedule's effective rate W'."""
    own = planned_spread_rates(module_plan).get(parent)
    return own if own is not None else planned_spread_rate(module_plan, module.schedule.effective_rate)


def simulate(  # noqa: PLR0917 -- the positional interface is the contract with the bench and callers
    problem: ProblemSpec,
    plan: Plan,
    duration_s: float,
    arrivals: Arrivals = "uniform",
    jitter: float = 0.0,
    seed: int = 0,
    dispatch: Dispatch = "tc",
    children: Literal["spread", "burst"] = "spread",
    admission: Admission = "none",
    front_instances: int = 1,
    hop_samples: Sequence[float] | None = None,
    close_delay_s: float | None = None,
    late: Literal["own", "next"] = "own",
) -> SimulationReport:
    """Simulate ``duration_s`` seconds of arrivals through the plan's dispatch and machines.

    A parent batch's children arrive together. With ``children="spread"`` (TC only) the worker that
    emits them dispatches child ``k`` of the batch at ``completion + k / rate`` (a stateless, per-batch
    spread; latency still counts from the real arrival), ``rate`` being the plan's rate for that parent
    (``dispatch.spread_rates[parent]``, :func:`planner.robust.planned_spread_rates`), else its
    ``dispatch.spread_rate`` (:func:`planner.dispatch.planned_spread_rate`), else ``W'_child``;
    ``"burst"`` dispatches them all at the completion time, which overflows the child's windows.

    ``admission`` (TC only) puts the front's batch-slot admission in front of every root module
    (:class:`_FrontAdmission`; :data:`Admission`): a shed arrival yields no request and no path, so
    ``end_to_end.slo_attainment`` is over the admitted frames; ``frames_offered`` and ``frames_shed``
    count the root arrivals. ``front_instances`` > 1: that many fronts each counting only their own
    frames (no shared counts), each arrival at one of them at random. ``hop_samples`` (s, measured
    deliveries; at least one, none negative): every request's hop is drawn from them (module doc); a
    worker closes a window ``close_delay_s`` after its end (None: its group's planned hop); a request
    delivered after its window closed runs as a batch of its own (``late="own"``, as the worker does
    today) or joins the same window a period later, the first whose close it makes (``"next"``)."""
    hops = None
    if hop_samples is not None:
        hops = np.sort(np.asarray(hop_samples, dtype=float))
        if hops.size == 0 or not np.all(np.isfinite(hops)) or hops[0] < 0:
            raise ValueError("hop_samples must be a non-empty list of finite delays >= 0 s")
    rng = np.random.default_rng(seed)
    prices = {name: hw.price_per_hour for name, hw in problem.hardware.items()}
    order = problem.order()
    parents = problem.parents()
    kids = problem.children()
    spread = dispatch == "tc" and children == "spread"
    modules = {
        m: _Module(
            m,
            plan.modules[m],
            dispatch=dispatch,
            jitter=jitter,
            rng=rng,
            prices=prices,
            hop_samples=hops,
            close_delay_s=close_delay_s,
            late_policy=late,
        )
        for m in order
    }
    sources = {m: _Source(problem.modules[m].rate, arrivals, rng) for m in order if not parents[m]}
    fronts: dict[str, _FrontAdmission] = {}
    if admission != "none" and dispatch == "tc":
        tails = _tails(problem, plan, modules)
        for m in sources:
            mod = modules[m]
            caps = (
                root_window_caps(plan.modules[m], mod.schedule, has_children=bool(kids[m]))
                if admission == "planned"
                else mod.schedule.window_lists()[4]
            )
            fronts[m] = _FrontAdmission(
                mod, [int(c) for c in caps], tails[m], problem.slo_s, front_instances, rng
            )
    ratio = {
        (p, c): problem.modules[c].rate / sum(problem.modules[q].rate for q in parents[c])
        for c in order
        for p in parents[c]
    }
    acc = {edge: [0.0] for edge in ratio}
    spread_rate = {(p, c): _spread_rate(plan.modules[c], p, modules[c]) if spread else 0.0 for p, c in ratio}
    e2e = _Hist()
    slo_ok = 0
    n_chunks = max(1, math.ceil(duration_s / CHUNK_S))
    for i in range(n_chunks + 1):
        final = i == n_chunks
        t0, t1 = i * CHUNK_S, min((i + 1) * CHUNK_S, duration_s)
        horizon = math.inf if final else t1
        inbox: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {m: [] for m in order}
        for m in order:
            if m in sources and not final:
                t = sources[m].generate(t0, t1)
                if m in fronts:
                    v, keep = fronts[m].admit(t)
                    inbox[m].append((t[keep], v[keep], t[keep]))
                else:
                    inbox[m].append((t, t, t))
            parts = inbox[m]
            t_in, v_in, o_in = (
                np.concatenate([p[j] for p in parts]) if parts else np.empty(0) for j in range(3)
            )
            done, orig = modules[m].step(t_in, v_in, o_in, horizon)
            if not kids[m]:
                lat = done - orig
                e2e.add(lat)
                slo_ok += int(np.sum(lat <= problem.slo_s + _TOL))
            for c in kids[m]:
                inbox[c].append(_spawn(done, orig, ratio[(m, c)], acc[(m, c)], spread_rate[(m, c)]))
    return _report(
        problem,
        plan,
        modules,
        e2e,
        slo_ok,
        duration_s=duration_s,
        arrivals=arrivals,
        dispatch=dispatch,
        jitter=jitter,
        seed=seed,
    ).model_copy(
        update={
            "admission": admission if fronts else "none",
            "frames_offered": sum(f.offered for f in fronts.values()),
            "frames_shed": sum(f.shed for f in fronts.values()),
            "front_instances": max(1, front_instances) if fronts else 1,
        }
    )


def _report(
    problem: ProblemSpec,
    plan: Plan,
    modules: dict[str, _Module],
    e2e: _Hist,
    slo_ok: int,
    *,
    duration_s: float,
    arrivals: Arrivals,
    dispatch: Dispatch,
    jitter: float,
    seed: int,
) -> SimulationReport:
    stats: dict[str, ModuleStats] = {}
    for name, mod in modules.items():
        planned = plan.modules[name].worst_case_latency_s
        windows = mod.windows_elapsed()
        nonempty = mod.batches
        measured = mod.latency.max
        stats[name] = ModuleStats(
            requests=mod.requests,
            batches=mod.batches,
            windows=windows,
            empty_windows=max(0, windows - nonempty) if dispatch == "tc" else 0,
            overflow_batches=mod.overflow,
            mean_fill=mod.fill_sum / mod.batches if mod.batches else 0.0,
            latency=mod.latency.stats(),
            queue_wait=mod.wait.stats(),
            planned_worst_case_s=planned,
            schedule_worst_case_s=mod.schedule.worst_case_latency_s,
            theorem1_s=mod.schedule.theorem1_s,
            measured_worst_case_s=measured,
            within_plan=measured <= planned + 1e-6,
            within_schedule=measured <= mod.schedule.worst_case_latency_s + 1e-6,
        )
    planned_e2e = max(sum(plan.modules[m].worst_case_latency_s for m in path) for path in problem.paths())
    return SimulationReport(
        problem=problem.name,
        duration_s=duration_s,
        arrivals=arrivals,
        dispatch=dispatch,
        jitter=jitter,
        seed=seed,
        requests=sum(s.requests for s in stats.values()),
        modules=stats,
        end_to_end=EndToEndStats(
            paths=e2e.count,
            latency=e2e.stats(),
            slo_s=problem.slo_s,
            slo_attainment=slo_ok / e2e.count if e2e.count else 1.0,
            planned_worst_case_s=planned_e2e,
        ),
        all_within_plan=all(s.within_plan for s in stats.values()),
    )
