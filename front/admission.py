"""Admission control of the front: refuse, before anything is stored or enqueued, the frames the
deployed plan cannot serve within their deadline, and say why and when to come back.

The front is stateless (a Lambda function; any number of instances), so the decision uses only
what every instance can compute alone -- the deployment's dispatch schedule -- plus cheap state
local to the instance. Checks, in order (docs/loadtest.md has the reasoning and the measurements):

1. **per API key** (429 ``rate_limited``): a token bucket per key (frames/s and a burst, per key
   with ``key_limits``), before anything app-wide; what a key took is not given back when a later
   check refuses the frames, so a flooding key exhausts its own bucket, not the app's capacity;
2. **fair share** (503 ``over_planned_rate``): while several keys send to an app, each may use
   what the others' offered rates leave of the admitted rate, and at least its max-min share; a key
   within that share is not refused by the planned rate (3.), and a key over it leaves free, in the
   batch windows a frame can reach (4.), the places the keys within theirs are expected to need
   (503 ``slot_full`` otherwise);
3. **planned rate** (503 ``over_planned_rate``): a GCRA (virtual scheduling) limiter at the app's
   planned frame rate plus a headroom, capped at the rate the plan's machines sustain
   (min over modules of schedule rate / requests per frame), with a burst tolerance in seconds;
4. **batch slots** (503 ``slot_full`` / ``queue_backlog`` / ``deadline``): TC dispatch gives a
   frame arriving at ``t`` the slot ``slot_at(t)``, one batch of one machine that holds at most
   ``b`` requests, and for a dispatch-aware plan at most what the plan's realisation assumed the
   window holds (``planner.dispatch.root_window_caps``: the children were sized for the bursts of
   windows that full, whatever the arrival process). The instance counts what it put in each slot;
   a full slot spills the frame into the next windows while the slot's bound (window end + the
   window's steady-state queue wait + batch duration + the hop that delivers the batch + the
   downstream modules' planned worst case) still meets the frame's deadline.
   A machine whose queue holds more than it can run within the SLO (visible + in flight, read with
   ``GetQueueAttributes`` at most once per ``queue_check_s``) is skipped.

A JSON batch of frames is admitted whole or not at all; one of more frames than any request can
ever get (the windows within the SLO at the best moment of the schedule) is 503 ``batch_too_large``
with how many fit and no retry time. Everything here is mechanism over the plan. Without the
shared counter (``shared_slots``, ``SKINFLINT_ADMISSION_SHARED``) N instances can each fill a slot --
the worker's early drop (Nexus) is the backstop that reports such frames as dropped instead of late;
with it a window's count lives in DynamoDB (``core/adapters/slots.py``), counted once per POST, root
module and window the POST's frames land in (:meth:`Admission._take_shared`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from front.limiters import Gcra, TokenBucket

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from core.adapters.slots import SlotCounter
    from core.routing import Route, Router
    from core.schema import Deployment

__all__ = [
    "Admission",
    "AdmissionConfig",
    "Admitted",
    "Shed",
    "requests_per_frame",
]

_PRUNE_EVERY = 256  # admissions between two prunes of the slot counters and idle key buckets
_MOST_SCAN = 512  # windows of one schedule period looked at for the largest batch a request can get
_SHARE_TAU_S = 2.0  # s: time constant of a key's offered-rate estimate (fair share)
_SHARE_ACTIVE_S = 5.0  # s: a key that sent frames to the app this recently shares its admitted rate
_SHARE_SLACK = (
    0.1  # a key's share is this much under what the others leave it (the app's limiter keeps slack)
)
_KEY_IDLE_S = 300.0  # s: a key's bucket unused this long is forgotten (it would be full again)


@dataclass(frozen=True)
class AdmissionConfig:
    """Knobs of admission control (environment: ``SKINFLINT_ADMISSION_*``)."""

    enabled: bool = True
    key_rate_per_s: float = 100.0  # frames/s per API key and front instance; 0 turns the check off
    key_burst: float = 200.0  # frames a key may send at once
    # per key (its SHA-256 hex digest, as the config table stores it, or a prefix of >= 12 digits):
    # (frames/s, burst) in place of the two above
    key_limits: dict[str, tuple[float, float]] = field(default_factory=dict)
    rate_headroom: float = 0.1  # admit up to the planned frame rate x (1 + headroom)
    burst_s: float = 1.0  # s: how far ahead of the planned pace a frame may be admitted (GCRA tolerance)
    max_spill_slots: int = 64  # windows looked at after the arrival slot
    queue_check_s: float = 1.0  # s between depth reads of one queue; 0 turns the backlog check off
    margin_s: float = 0.0  # s kept in reserve when comparing a slot's bound with the deadline
    # count the frames of each window in DynamoDB too (core/adapters/slots.py), so every front
    # instance sees them: the cap holds across Lambda instances, at one conditional write per POST,
    # root module and window (two when the window has room for part of the POST only)
    shared_slots: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AdmissionConfig:
        environ = os.environ if env is None else env
        defaults = cls()

        def num(name: str, default: float) -> float:
            raw = environ.get(f"SKINFLINT_ADMISSION_{name}")
            return float(raw) if raw not in (None, "") else default

        return cls(
            enabled=environ.get("SKINFLINT_ADMISSION", "on").lower() not in ("0", "off", "false", "no"),
            key_rate_per_s=num("KEY_RATE", defaults.key_rate_per_s),
            key_burst=num("KEY_BURST", defaults.key_burst),
            rate_headroom=num("HEADROOM", defaults.rate_headroom),
            burst_s=num("BURST_S", defaults.burst_s),
            max_spill_slots=int(num("MAX_SPILL", defaults.max_spill_slots)),
            queue_check_s=num("QUEUE_CHECK_S", defaults.queue_check_s),
            margin_s=num("MARGIN_S", defaults.margin_s),
            shared_slots=environ.get("SKINFLINT_ADMISSION_SHARED", "off").lower()
            in ("1", "on", "true", "yes"),
            key_limits=_key_limits(environ.get("SKINFLINT_ADMISSION_KEY_LIMITS", "")),
        )

    def key_limit(self, digest: str) -> tuple[float, float]:
        """(frames/s, burst) of the key whose SHA-256 hex digest is ``digest``."""
        for prefix, limit in self.key_limits.items():
            if digest.startswith(prefix):
                return limit
        return self.key_rate_per_s, self.key_burst


def _key_limits(raw: str) -> dict[str, tuple[float, float]]:
    """``SKINFLINT_ADMISSION_KEY_LIMITS``: JSON ``{"<sha-256 hex digest of the key, or a prefix of
    >= 12 digits>": {"rate": frames/s, "burst": frames}}`` (``printf %s KEY | sha256sum``); a
    missing burst is twice the rate; a rate of 0 leaves the key unlimited."""
    if not raw.strip():
        return {}
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise ValueError("SKINFLINT_ADMISSION_KEY_LIMITS must be a JSON object of key digest -> limits")
    out: dict[str, tuple[float, float]] = {}
    for digest, limit in doc.items():
        prefix = str(digest).lower()
        if len(prefix) < 12 or len(prefix) > 64 or any(c not in "0123456789abcdef" for c in prefix):
            raise ValueError(
                f"SKINFLINT_ADMISSION_KEY_LIMITS: {digest!r} is not a SHA-256 hex digest (>= 12 digits)"
            )
        if not isinstance(limit, dict) or "rate" not in limit or set(limit) - {"rate", "burst"}:
            raise ValueError(f"SKINFLINT_ADMISSION_KEY_LIMITS[{digest!r}]: give rate (and burst)")
        rate = float(limit["rate"])
        burst = float(limit.get("burst", 2 * rate))
        if not (math.isfinite(rate) and math.isfinite(burst)) or rate < 0 or (rate > 0 and burst < 1):
            raise ValueError(f"SKINFLINT_ADMISSION_KEY_LIMITS[{digest!r}]: rate >= 0 and burst >= 1")
        out[prefix] = (rate, burst)
    return out


@dataclass(frozen=True)
class Shed:
    """A refusal: HTTP ``status`` (429 or 503), ``error`` code, ``reason``, and when to retry
    (None: never, as sent: ``batch_too_large``, whose ``max_frames`` says how many frames fit)."""

    status: int
    error: str
    reason: str
    retry_after_s: float | None
    max_frames: int | None = None


@dataclass(frozen=True)
class Admitted:
    """Per frame, the route of every root module; ``spilled`` frames went past their arrival slot."""

    routes: list[dict[str, Route]]
    spilled: int = 0
    shared_errors: int = 0  # windows the shared count could not be read for (admitted on the own count)


def requests_per_frame(dep: Deployment) -> dict[str, float]:
    """Mean requests of every module per frame (1 at the roots, times the fan-out along each edge)."""
    mu: dict[str, float] = {module: (1.0 if module in dep.roots else 0.0) for module in dep.plan.modules}
    done: set[str] = set()

    def visit(module: str) -> None:  # depth-first in topological order (the DAG is validated upstream)
        if module in done:
            return
        for src, dst, _ in dep.edges:
            if dst == module:
                visit(src)
        mu[module] = (1.0 if module in dep.roots else 0.0) + sum(
            mu[source] * fanout for source, target, fanout in dep.edges if target == module
        )
        done.add(module)

    for module in list(mu):
        visit(module)
    return mu


@dataclass
class _KeyShare:
    """One key's use of one app: its offered rate (frames past its own bucket, an estimate decaying
    with ``_SHARE_TAU_S``), since when it sends (``first``) and the pace of its share."""

    first: float
    offered: float = 0.0
    updated: float = -math.inf
    tat: float = -math.inf

    def estimate(self, now: float) -> float:
        return self.offered * math.exp(-max(0.0, now - self.updated) / _SHARE_TAU_S)

    def claim(self, now: float, fair: float) -> float:
        """What the key holds of the others' rate: its offered rate up to the fair share, and the
        fair share while its estimate is young (a newcomer is not starved while it builds up)."""
        young = now - self.first < _SHARE_TAU_S
        return min(max(self.estimate(now), fair if young else 0.0), fair)

    def offer(self, frames: int, now: float) -> None:
        if now - self.updated > _SHARE_ACTIVE_S:  # back after a pause: a newcomer again
            self.first = now
        self.offered = self.estimate(now) + frames / _SHARE_TAU_S
        self.updated = now


@dataclass(frozen=True)
class _Share:
    """A key's place among the keys sending to an app now: the pace of its share (``rate``
    frames/s), whether it is ``light`` (within ``rate / keys`` while others send: the app's limiter
    does not refuse its frames) and, for a key over its share, ``reserve_rate``: the frames/s the
    light keys claim, for which it leaves places in the batch windows (:meth:`Admission._find_slot`)."""

    key: _KeyShare
    rate: float
    light: bool = False
    reserve_rate: float = 0.0


@dataclass
class _AppState:
    """What admission derives once per deployment version: the limiter and the per-module bounds."""

    key: tuple[int, float]  # (version, origin): a new deployment resets the slot counts
    gcra: Gcra | None
    rate: float  # frames/s the limiter admits
    tail_s: dict[str, float]  # planned worst case of the modules below a module (longest path)
    backlog_limit: dict[tuple[str, int], int]  # (module, group) -> queue depth beyond which it is skipped
    caps: dict[str, list[int]]  # root module -> frames each window of its period may take
    most: dict[str, int] = field(default_factory=dict)  # root module -> frames one request can ever get
    slots: dict[tuple[str, int], int] = field(default_factory=dict)  # (module, batch id) -> frames
    slot_end: dict[tuple[str, int], float] = field(default_factory=dict)


def _bound(sched: Any, st: _AppState, module: str, route: Route) -> float:
    """When the batch of ``route``'s window is done at the latest, and everything below it: window
    end + the window's steady-state queue wait + batch duration + the hop that delivers it + the
    downstream modules' planned worst case."""
    group = sched.groups[route.group]
    wait = sched.window_wait_s(route.batch_id)
    return float(route.window_end + wait + group.duration_s + group.overhead_s + st.tail_s[module])


def _cap(sched: Any, st: _AppState, module: str, route: Route) -> int:
    """Frames ``route``'s window may take: the plan's cap for it, else its batch."""
    caps = st.caps.get(module)
    return int(caps[route.batch_id % len(caps)] if caps else sched.groups[route.group].batch)


def _module_wcl(router: Router, module: str) -> float:
    planned = router.deployment.plan.modules[module].worst_case_latency_s
    sched = router.schedule(module)
    return max(planned, float(sched.worst_case_latency_s) if sched is not None else 0.0)


def _tails(router: Router) -> dict[str, float]:
    dep = router.deployment
    memo: dict[str, float] = {}

    def tail(module: str) -> float:
        if module not in memo:
            memo[module] = max(
                (_module_wcl(router, child) + tail(child) for child, _ in dep.children(module)), default=0.0
            )
        return memo[module]

    return {module: tail(module) for module in dep.plan.modules}


def _caps(router: Router) -> dict[str, list[int]]:
    """Per root module, the frames each window of its schedule's period may take
    (``planner.dispatch.root_window_caps``); a module without a schedule is left out (its batch)."""
    from planner.dispatch import root_window_caps  # cold start: numpy, on the first admitted frame

    dep = router.deployment
    out: dict[str, list[int]] = {}
    for module in dep.roots:
        sched = router.schedule(module)
        if sched is not None and hasattr(sched, "window_lists"):
            out[module] = root_window_caps(
                dep.plan.modules[module], sched, has_children=bool(dep.children(module))
            )
    return out


class Admission:
    """Admission control of one front instance (thread-safe). ``depth(queue_url)`` reads a queue's
    visible + in-flight count in tasks, the unit of the backlog limits (``TaskQueues.depth``: SQS's
    message count times the tasks per message this front packed there, core/wire.py); it is
    optional. ``slots``: the counts every front instance shares
    (:class:`core.adapters.slots.SlotCounter`), consulted for a window this instance finds free when
    ``config.shared_slots``; its call is made under the instance's lock (a Lambda front serves one
    request at a time)."""

    def __init__(self, config: AdmissionConfig | None = None, slots: SlotCounter | None = None):
        self.config = config or AdmissionConfig()
        self.slots = slots if self.config.shared_slots else None
        self._lock = threading.Lock()
        self._apps: dict[str, _AppState] = {}
        self._keys: dict[str, TokenBucket] = {}
        self._shares: dict[str, dict[str, _KeyShare]] = {}  # app -> key digest -> its use of the app
        self._depths: dict[str, tuple[float, int | None]] = {}  # queue url -> (read at, depth)
        self._refreshing: set[str] = set()  # queue urls whose depth a request is reading now
        self._calls = 0

    # -- per deployment ----------------------------------------------------------------------------
    def prepare(self, router: Router) -> None:
        """Derive the deployment's limiter and bounds now (else on its first frame)."""
        self._state(router)

    def _state(self, router: Router) -> _AppState:
        dep = router.deployment
        key = (dep.version, dep.origin_s)
        st = self._apps.get(dep.app)
        if st is not None and st.key == key:
            return st
        mu = requests_per_frame(dep)
        capacity = math.inf
        for module, mp in dep.plan.modules.items():
            sched = router.schedule(module)
            module_rate = (
                float(sched.effective_rate)
                if sched is not None
                else sum(group.machines * group.rate_per_machine for group in mp.groups)
            )
            if mu.get(module, 0.0) > 0:
                capacity = min(capacity, module_rate / mu[module])
        planned = dep.frame_rate * (1.0 + self.config.rate_headroom) if dep.frame_rate > 0 else math.inf
        rate = min(planned, capacity)
        gcra = Gcra(rate, self.config.burst_s) if math.isfinite(rate) and rate > 0 else None
        limits = {
            (module, gi): math.ceil(group.rate_per_machine * dep.slo_s) + group.batch
            for module, mp in dep.plan.modules.items()
            for gi, group in enumerate(mp.groups)
        }
        st = _AppState(
            key=key, gcra=gcra, rate=rate, tail_s=_tails(router), backlog_limit=limits, caps=_caps(router)
        )
        self._apps[dep.app] = st
        return st

    # -- the decision ------------------------------------------------------------------------------
    def admit(
        self,
        router: Router,
        n_frames: int,
        now: float,
        api_key: str | None = None,
        depth: Callable[[str], int] | None = None,
    ) -> Admitted | Shed:
        """Admit ``n_frames`` frames of ``router``'s app arriving at ``now`` (epoch s), or say why not."""
        dep = router.deployment
        if not self.config.enabled:
            return Admitted(
                [{module: router.route(module, now) for module in dep.roots} for _ in range(n_frames)]
            )
        stale: list[str] | None = [] if depth is not None and self.config.queue_check_s > 0 else None
        try:
            with self._lock:
                return self._decide(router, n_frames, now, api_key, stale)
        finally:
            if stale and depth is not None:
                self._refresh_depths(stale, depth, now)

    def _decide(
        self, router: Router, n_frames: int, now: float, api_key: str | None, stale: list[str] | None
    ) -> Admitted | Shed:
        """The decision (the caller holds the lock)."""
        dep = router.deployment
        self._calls += 1
        if self._calls % _PRUNE_EVERY == 0:
            self._prune(now)
        digest = hashlib.sha256(api_key.encode()).hexdigest() if api_key else None
        shed = self._take_key(digest, n_frames, now)
        if shed is not None:
            return shed
        st = self._state(router)
        share = self._fair_share(dep.app, digest, st.rate, n_frames, now) if st.gcra is not None else None
        if isinstance(share, Shed):
            return share
        new_tat = None
        if st.gcra is not None:
            wait, new_tat = st.gcra.check(n_frames, now)
            if wait > 0 and share is not None and share.light:
                # within its max-min share: the others' frames, not this key's, are over the rate
                wait, new_tat = 0.0, max(st.gcra.tat, now) + n_frames * st.gcra.interval
            if wait > 0:
                return Shed(
                    503,
                    "over_planned_rate",
                    f"{dep.app} is planned for {dep.frame_rate:g} frames/s; this front admits up to "
                    f"{st.rate:.3g} frames/s with a {self.config.burst_s:g} s burst",
                    wait,
                )
        out = self._reserve(router, st, n_frames, now, stale, share.reserve_rate if share else 0.0)
        if isinstance(out, Shed):
            if out.error == "slot_full" and n_frames > 1:
                return self._batch_shed(router, st, n_frames, out)
            return out
        if st.gcra is not None and new_tat is not None:
            st.gcra.commit(new_tat)
        if share is not None:
            share.key.tat = max(share.key.tat, now) + n_frames / share.rate
        return out

    def _fair_share(
        self, app: str, digest: str | None, rate: float, n_frames: int, now: float
    ) -> _Share | Shed | None:
        """Max-min sharing of the app's admitted ``rate`` between the keys sending to it now: each
        other key claims its offered rate up to ``rate / keys``, this key may use what they leave
        (less ``_SHARE_SLACK``, so the app's limiter keeps room for the others' jitter) and at least
        ``rate / keys``, paced like the app's limiter. Alone, a key has the whole rate. A
        refusal is 503 ``over_planned_rate`` (within the key's own limit, so it counts as demand).
        A key that has offered at most ``rate / keys`` is light: the app's limiter lets its frames pass
        (what the estimates of the others lag behind is theirs to lose, not its), a request of at
        most that share's burst (``rate / keys x burst_s`` frames, at least one). A key offering
        more leaves the light keys' claims free in the batch windows (``reserve_rate``).
        Returns the key's share, or None without a key."""
        if digest is None:
            return None
        shares = self._shares.setdefault(app, {})
        mine = shares.get(digest)
        if mine is None:
            mine = shares[digest] = _KeyShare(first=now)
        before = mine.estimate(now)  # what it sent so far (with this request's, a steady key peaks over it)
        mine.offer(n_frames, now)
        active = [s for s in shares.values() if now - s.updated <= _SHARE_ACTIVE_S]
        if len(active) <= 1:
            return _Share(mine, rate)
        fair = rate / len(active)
        others = sum(s.claim(now, fair) for s in active if s is not mine)
        allowed = max(fair, (rate - others) * (1.0 - _SHARE_SLACK))
        light = before <= fair and n_frames <= max(1.0, fair * self.config.burst_s)
        reserve = 0.0
        if not light:
            reserve = sum(s.claim(now, fair) for s in active if s is not mine and s.estimate(now) <= fair)
        ahead = max(mine.tat, now) - now
        if ahead > self.config.burst_s + 1e-12:
            return Shed(
                503,
                "over_planned_rate",
                f"{app} is shared by {len(active)} API keys now: this key's share is {allowed:.3g} of the "
                f"{rate:.3g} frames/s admitted",
                ahead - self.config.burst_s,
            )
        return _Share(mine, allowed, light, reserve)

    def _take_key(self, digest: str | None, n_frames: int, now: float) -> Shed | None:
        """The key's own limit, before anything app-wide: frames over it are 429 and never reach the
        app's limiter. What a key takes is not given back when the app refuses the frames: a key
        that floods past the app's capacity runs out of tokens (429, which the control loop does
        not count as demand) instead of holding the app's capacity from every other key."""
        cfg = self.config
        if digest is None:
            return None
        bucket = self._keys.get(digest[:32])
        if bucket is None:
            rate, burst = cfg.key_limit(digest)
            if rate <= 0:
                return None
            bucket = self._keys[digest[:32]] = TokenBucket(rate, burst, now)
        wait = bucket.take(n_frames, now)
        if wait == 0:
            return None
        if math.isinf(wait):
            return Shed(
                429,
                "rate_limited",
                f"{n_frames} frames in one request exceed this key's burst of {bucket.burst:g}",
                1.0 / bucket.rate,
            )
        return Shed(
            429,
            "rate_limited",
            f"this API key is limited to {bucket.rate:g} frames/s (burst {bucket.burst:g})",
            wait,
        )

    def _reserve(
        self,
        router: Router,
        st: _AppState,
        n_frames: int,
        now: float,
        stale: list[str] | None,
        reserve_rate: float = 0.0,
    ) -> Admitted | Shed:
        dep = router.deployment
        deadline = now + dep.slo_s - self.config.margin_s
        taken: list[tuple[str, int]] = []
        # places the shared counter counted for this request, per window (one write per window: the
        # places of the request's later frames are counted with its first, ``held`` until they come)
        counted_here: dict[tuple[str, int], int] = {}
        held: dict[tuple[str, int], int] = {}
        routes: list[dict[str, Route]] = []
        spilled = errors = 0
        for index in range(n_frames):
            frame: dict[str, Route] = {}
            for module in dep.roots:
                found = self._find_slot(
                    router,
                    st,
                    module,
                    now,
                    deadline,
                    stale,
                    n_frames - index,
                    (counted_here, held),
                    reserve_rate,
                )
                if isinstance(found, Shed):
                    for slot_key in taken:  # all or nothing
                        st.slots[slot_key] -= 1
                    self._give_back(dep, counted_here)
                    return found
                route, hops, counted = found
                slot_key = (module, route.batch_id)
                st.slots[slot_key] = st.slots.get(slot_key, 0) + 1
                st.slot_end[slot_key] = route.window_end
                taken.append(slot_key)
                errors += counted is None
                frame[module] = route
                spilled += hops > 0
            routes.append(frame)
        self._give_back(dep, {key: n for key, n in held.items() if n > 0})  # none in practice
        return Admitted(routes, spilled, errors)

    def _give_back(self, dep: Deployment, places: dict[tuple[str, int], int]) -> None:
        """Release ``places`` (window -> frames) in the shared counter: one write per window."""
        if self.slots is None:
            return
        for (module, batch_id), count in places.items():
            if count > 0:
                self.slots.release(dep.app, dep.version, module, batch_id, count)

    def _find_slot(
        self,
        router: Router,
        st: _AppState,
        module: str,
        now: float,
        deadline: float,
        stale: list[str] | None,
        left: int = 1,
        shared: tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]] | None = None,
        reserve_rate: float = 0.0,
    ) -> tuple[Route, int, bool | None] | Shed:
        """The first window from ``now`` on that can meet ``deadline`` and has room: (its route, the
        windows passed over, whether the shared counter counted the frame: True, False when there is
        none, None when it could not answer), or why none. ``left``: this request's frames still to
        place (this one included); ``shared``: the request's (counted, held) places per window;
        ``reserve_rate``: frames/s of other keys this key leaves places for (:meth:`_kept`)."""
        sched = router.schedule(module)
        full = backlogged = 0
        at = now
        first_end = math.inf
        for hop in range(self.config.max_spill_slots + 1):
            route = router.route(module, at)
            first_end = min(first_end, route.window_end)
            if _bound(sched, st, module, route) > deadline:
                break
            cap = _cap(sched, st, module, route)
            if st.slots.get((module, route.batch_id), 0) >= cap:
                full += 1
            elif self._backlogged(route.queue_url, st.backlog_limit[(module, route.group)], now, stale):
                backlogged += 1
            else:
                if reserve_rate > 0 and self._kept(router, st, module, now, deadline, reserve_rate):
                    return Shed(
                        503,
                        "slot_full",
                        f"the places left in the batch windows of {module} that meet the deadline are "
                        f"kept for the other API keys sending to {router.deployment.app} within their share",
                        max(first_end - now, 0.01),
                    )
                if self.slots is None:
                    return route, hop, False
                got = self._take_shared(router, st, module, route, cap, left, shared)
                if got is not False:
                    return route, hop, got
                # other front instances filled it: full here too, no second call for this window
                st.slots[(module, route.batch_id)] = cap
                st.slot_end[(module, route.batch_id)] = route.window_end
                full += 1
            at = route.window_end + 1e-6  # windows are [start, end): the next one
        if full == 0 and backlogged == 0:
            return Shed(
                503,
                "deadline",
                f"no batch slot of {module} can finish within the {router.deployment.slo_s:g} s SLO",
                1.0,
            )
        if backlogged > full:
            return Shed(
                503,
                "queue_backlog",
                f"the machines of {module} have more queued than they can run within the SLO",
                max(self.config.queue_check_s, 0.1),
            )
        # the earliest a retry can succeed: when the arrival slot has moved on by one window
        return Shed(
            503,
            "slot_full",
            f"every batch slot of {module} that can meet the deadline is full ({full} looked at)",
            max(first_end - now, 0.01),
        )

    def _kept(
        self, router: Router, st: _AppState, module: str, now: float, deadline: float, reserve_rate: float
    ) -> bool:
        """Whether the free places of the windows a frame arriving ``now`` can reach (those that meet
        ``deadline``) are kept for the light keys: what they are expected to send before the last of
        those windows ends (``reserve_rate`` x that time, rounded up), at most all the places but
        one (so where a frame can reach a single place, a key over its share is not stopped for
        good). Windows over their backlog limit, by the depth cached now, do not count as free.
        Looks at the windows of this instance's counts (at most ``max_spill_slots + 1``), no I/O."""
        sched = router.schedule(module)
        places = free = 0
        end = at = now
        for _hop in range(self.config.max_spill_slots + 1):
            route = router.route(module, at)
            if _bound(sched, st, module, route) > deadline:
                break
            cap = _cap(sched, st, module, route)
            places += cap
            depth = self._depths.get(route.queue_url, (0.0, None))[1]
            if depth is None or depth <= st.backlog_limit[(module, route.group)]:
                free += max(0, cap - st.slots.get((module, route.batch_id), 0))
            end = route.window_end
            at = route.window_end + 1e-6
        keep = min(math.ceil(reserve_rate * (end - now) - 1e-9), places - 1)
        return free - 1 < keep

    def _take_shared(
        self,
        router: Router,
        st: _AppState,
        module: str,
        route: Route,
        cap: int,
        left: int,
        shared: tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]] | None,
    ) -> bool | None:
        """Count one frame in ``route``'s window in the shared counter: from the places this request
        holds there, else with one :meth:`~core.adapters.slots.SlotCounter.take_upto` for as many of
        the request's ``left`` frames as the window has room for (at most what this instance's own
        count leaves): one write when they fit, two when the window has room for part of them only
        (the refusal says how many places are left; the second write takes them and the frames
        beyond spill to the next window, one more ``take_upto`` there), none more for the window
        when it is full. The places counted beyond this frame are ``held`` for the request's next
        frames, so a POST costs one ``take_upto`` per root module and window it lands in, not one
        per frame. A window found full with the places taken is counted full here once they are
        used (this instance's count raised to ``cap`` less them), so no later frame asks for it
        again. True when counted, False when the window is full, None when DynamoDB could not
        answer (the frame is admitted on this instance's count)."""
        assert self.slots is not None
        counted, held = shared if shared is not None else ({}, {})
        key = (module, route.batch_id)
        if held.get(key, 0) > 0:
            held[key] -= 1
            return True
        dep = router.deployment
        want = max(1, min(left, cap - st.slots.get(key, 0)))
        got = self.slots.take_upto(dep.app, dep.version, module, route.batch_id, cap, route.window_end, want)
        if got is None:
            return None
        if got <= 0:
            return False
        if got < want:  # the window is full with these places: once they are used, no more asking
            st.slots[key] = max(st.slots.get(key, 0), cap - got)
            st.slot_end[key] = route.window_end
        counted[key] = counted.get(key, 0) + got
        held[key] = got - 1
        return True

    def _batch_shed(self, router: Router, st: _AppState, n_frames: int, full: Shed) -> Shed:
        """A batch refused for full slots: if more frames than any request can ever get (the windows
        within the SLO of the emptiest moment of the schedule), say so and how many fit, with no
        retry time (a retry would be refused the same way for ever); else the ``full`` refusal."""
        dep = router.deployment
        most = min(self._most_frames(router, st, module) for module in dep.roots)
        if n_frames <= most:
            return full
        return Shed(
            503,
            "batch_too_large",
            f"{dep.app}'s plan can never take {n_frames} frames in one request: the batch windows "
            f"that meet its {dep.slo_s:g} s SLO hold at most {most}; send at most {most} per request",
            None,
            max_frames=most,
        )

    def _most_frames(self, router: Router, st: _AppState, module: str) -> int:
        """The most frames one request can get at ``module`` with every slot empty: the caps of the
        windows a frame arriving at the end of a window may reach, at the best such moment of one
        schedule period (cached per deployment)."""
        if module in st.most:
            return st.most[module]
        sched = router.schedule(module)
        slo = router.deployment.slo_s - self.config.margin_s
        start = at = router.deployment.origin_s + 1.0
        period = float(getattr(sched, "period_s", 0.0) or 0.0)
        best = 0
        for _ in range(_MOST_SCAN):
            arrival = router.route(module, at).window_end - 1e-6  # latest arrival in this window
            total, probe = 0, arrival
            for _hop in range(self.config.max_spill_slots + 1):
                route = router.route(module, probe)
                if _bound(sched, st, module, route) > arrival + slo:
                    break
                total += _cap(sched, st, module, route)
                probe = route.window_end + 1e-6
            best = max(best, total)
            at = arrival + 2e-6
            if at - start >= period:
                break
        st.most[module] = best
        return best

    def _backlogged(self, url: str, limit: int, now: float, stale: list[str] | None) -> bool:
        """From the cached depth (no I/O under the lock); a stale one is put on ``stale`` for this
        request to re-read after the decision, unless another request is reading it already."""
        if stale is None:
            return False
        read_at, value = self._depths.get(url, (-math.inf, None))
        if now - read_at >= self.config.queue_check_s and url not in self._refreshing:
            self._refreshing.add(url)
            stale.append(url)
        return value is not None and value > limit

    def _refresh_depths(self, urls: list[str], depth: Callable[[str], int], now: float) -> None:
        """Read the depth of the queues this request found stale (outside the lock: a slow SQS call
        delays this request only)."""
        for url in urls:
            try:
                value: int | None = int(depth(url))
            except Exception:  # noqa: BLE001 - a failed read must not refuse frames (fail open)
                value = None
            with self._lock:
                self._depths[url] = (now, value)
                self._refreshing.discard(url)

    def _prune(self, now: float) -> None:
        for st in self._apps.values():
            old = [slot for slot, end in st.slot_end.items() if end < now - 5.0]
            for slot in old:
                st.slot_end.pop(slot, None)
                st.slots.pop(slot, None)
        idle = [digest for digest, bucket in self._keys.items() if now - bucket.last_take > _KEY_IDLE_S]
        for digest in idle:
            del self._keys[digest]
        for shares in self._shares.values():
            for digest in [d for d, share in shares.items() if now - share.updated > _KEY_IDLE_S]:
                del shares[digest]

    # -- introspection (tests, /metrics) ---------------------------------------------------------
    def admitted_rate(self, app: str) -> float | None:
        st = self._apps.get(app)
        return st.rate if st is not None else None

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                app: {"rate": st.rate, "slots": len(st.slots), "tail_s": dict(st.tail_s)}
                for app, st in self._apps.items()
            }
