"""Exact occupancy optimum of application-sized DAGs: branch and bound over one configuration per module
with Lagrangian lower bounds (docs/planner.md, "Occupancy at 5-10 modules").

Module m on configuration k at latency l costs f_k(l) = beta_k / min(l - d_k, u_k) (d the latency floor
d + o, beta = b / r, u = b / T: the flat cost T / r beyond d + u, dummy load below it). The problem is

    minimise  sum_m f_{k_m}(l_m)   s.t.  sum_{m in P} l_m <= SLO  for every root-to-leaf path P.

Dualising the path constraints with multipliers lambda_P >= 0 (mu_m: the sum over the paths through m)
separates it: L(lambda) = sum_m min_k min_l [f_k(l) + mu_m l] - SLO sum_P lambda_P, and the inner
minimum has a closed form (l = d + sqrt(beta / mu), capped at d + u and at the module's largest budget).
Every lambda gives a certified lower bound; the best one over lambda equals the convex-hull relaxation.
The search:

- an incumbent from the configurations that minimise the Lagrangian (and the caller's start, e.g.
  proportional budgets or the previous epoch's plan), each scored by the exact convex split of
  :func:`planner.convex.split_convex`;
- dual ascent (Polyak steps towards the incumbent), and at every lambda it visits, reduced-cost fixing:
  configuration k of module m is dropped when L(lambda) with m held on k is already >= the incumbent;
- branching on the module with the fewest configurations left, children in Lagrangian order, each
  node bounded by a short ascent warm-started from its parent's multipliers; leaves are exact convex
  splits. A node whose bound reaches the incumbent (within a relative 1e-9) is cut.

An optional ``should_stop`` callable (the caller's clock or node budget, read every few nodes) ends the
search early: the result then carries the best plan found and the smallest bound still open (its proven
gap). Pure numpy; no clock of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from planner.convex import path_lower_bound, split_convex

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from planner.latency import Config

__all__ = ["OccupancyResult", "solve_occupancy"]

REL_TOL = 1e-9  # a node whose bound is within this fraction of the incumbent is cut


@dataclass
class OccupancyResult:
    """The best plan found: a configuration and a latency above its floor (x) per module, its cost,
    a certified lower bound on the optimum and whether the search finished (bound = cost, proven)."""

    configs: list[Config] | None
    x: list[float] | None
    cost: float
    lower_bound: float
    nodes: int
    leaves: int
    finished: bool

    @property
    def gap(self) -> float:
        """Proven relative gap (cost - bound) / cost; 0 when finished."""
        if self.finished or self.configs is None:
            return 0.0 if self.finished else math.inf
        return max(0.0, (self.cost - self.lower_bound) / self.cost) if self.cost > 0 else 0.0


class _Problem:
    """Flat arrays of every module's candidate configurations (contiguous per module)."""

    def __init__(
        self,
        cands: Sequence[Sequence[Config]],
        rates: Sequence[float],
        paths: Sequence[Sequence[int]],
        slo: float,
        lmax: Sequence[float],
    ):
        self.n = len(cands)
        self.paths = _maximal(paths)
        self.slo = slo
        self.rates = list(rates)
        self.cands = [list(cs) for cs in cands]
        self.start = np.cumsum([0] + [len(cs) for cs in cands])[:-1]
        flat = [c for cs in cands for c in cs]
        self.configs = flat
        self.mod = np.repeat(np.arange(self.n), [len(cs) for cs in cands])
        rate = np.array(rates, dtype=float)[self.mod]
        ratio = np.array([c.ratio for c in flat])
        batch = np.array([c.batch for c in flat], dtype=float)
        self.d = np.array([c.floor for c in flat])
        self.beta = batch / ratio
        self.u = batch / rate
        self.flat = rate / ratio
        self.lmax = np.array(lmax, dtype=float)[self.mod]
        self.incidence = np.zeros((len(self.paths), self.n))
        for p, path in enumerate(self.paths):
            self.incidence[p, path] = 1.0
        # the same figures as (n, K) tables, one row per module (K: the most configurations of a
        # module), padded with harmless finite values; ``valid`` marks the real entries
        self.sizes = np.array([len(cs) for cs in cands])
        width = int(self.sizes.max(initial=1))
        self.valid = np.arange(width)[None, :] < self.sizes[:, None]
        self.rows = np.arange(self.n)
        self.beta2 = np.ones((self.n, width))
        self.d2 = np.zeros((self.n, width))
        self.cap2 = np.ones((self.n, width))
        self.beta2[self.valid] = self.beta
        self.d2[self.valid] = self.d
        self.cap2[self.valid] = np.minimum(self.u, self.lmax - self.d)
        self.sq2 = np.sqrt(self.beta2)

    def flat_index(self, m: int, j: int) -> int:
        """The flat index of module m's configuration j."""
        return int(self.start[m]) + j

    def phi(self, mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per configuration, as an (n, K) table (row m: module m's configurations, padded): min over l of
        f(l) + mu l (within (d, lmax]) and its argmin l. The padding is finite; callers mask it."""
        # x = sqrt(beta / mu) capped at min(u, lmax - d); mu = 0 (floored at 1e-200) lands on the cap
        x = np.minimum(self.sq2 * (1.0 / np.sqrt(np.maximum(mu, 1e-200)))[:, None], self.cap2)
        lat = self.d2 + x
        return self.beta2 / x + mu[:, None] * lat, lat


def _maximal(paths: Sequence[Sequence[int]]) -> list[list[int]]:
    """The paths whose module set is not inside another's (a join reached by a shortcut edge gives a
    path that another contains: its constraint is implied, every latency being positive)."""
    sets = [frozenset(p) for p in paths]
    return [
        list(p)
        for i, p in enumerate(paths)
        if not any(sets[i] < other or (sets[i] == other and j < i) for j, other in enumerate(sets))
    ]


class _Search:
    ROOT_ITERS, NODE_ITERS = 40, 8  # dual ascent steps at the root and at every other node

    def __init__(self, prob: _Problem, should_stop: Callable[[], bool] | None):
        self.p = prob
        self.should_stop = should_stop
        self.best_cost = math.inf
        self.best: tuple[list[int], list[float]] | None = None
        self.nodes = self.leaves = 0
        self.stopped = False
        self.open_bound = math.inf  # the smallest bound of a node left unexplored by a stop
        self.seen: set[tuple[int, ...]] = set()

    # ----------------------------------------------------------------- leaves

    def leaf(self, pick: Sequence[int], lam: np.ndarray | None = None) -> float:
        """Exact cost of one configuration per module (flat indices), recorded if it is the best."""
        key = tuple(pick)
        if key in self.seen:
            return math.inf
        self.seen.add(key)
        self.leaves += 1
        p = self.p
        beta = [float(p.beta[k]) for k in pick]
        u = [float(p.u[k]) for k in pick]
        room = [p.slo - sum(float(p.d[pick[j]]) for j in path) for path in p.paths]
        if any(r <= 0 for r in room):
            return math.inf
        x = self.split(beta, u, room, lam)
        if x is None:
            return math.inf
        cost = sum(b / min(xx, uu) for b, xx, uu in zip(beta, x, u, strict=True))
        if cost < self.best_cost * (1 - 1e-12):
            self.best_cost, self.best = cost, (list(pick), x)
        return cost

    def split(
        self, beta: list[float], u: list[float], room: list[float], lam: np.ndarray | None = None
    ) -> list[float] | None:
        """The exact split of one leaf: the dual's projected Newton method (:func:`dual_split`), taken
        when its primal cost is within 1e-10 of its dual bound (a certificate: weak duality); otherwise
        (or when the bound shows the leaf cannot beat the incumbent) the interior-point split of
        :mod:`planner.convex`, or nothing."""
        p = self.p
        found = dual_split(np.array(beta), np.array(u), p.incidence, np.array(room), self.best_cost, lam)
        if found is not None:
            x, dual = found
            if x is None:
                return None  # the leaf's dual bound reaches the incumbent
            cost = sum(b / min(xx, uu) for b, xx, uu in zip(beta, x, u, strict=True))
            if cost - dual <= 1e-10 * cost:
                return x
        if path_lower_bound(beta, u, p.paths, room, self.best_cost) >= self.best_cost * (1 - REL_TOL):
            return None
        return split_convex(beta, u, p.paths, room)

    # ----------------------------------------------------------------- bounds

    def lagrangian(
        self, lam: np.ndarray, alive: np.ndarray
    ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """L(lambda) over the alive configurations (``alive``: an (n, K) mask, see :class:`_Problem`);
        per module its minimum, per configuration its value, and per module its first argmin
        configuration (a column) and that one's l."""
        p = self.p
        val, lat = p.phi(lam @ p.incidence)
        val = np.where(alive, val, np.inf)
        mins = val.min(axis=1)
        arg = val.argmin(axis=1)  # the first at the minimum, as np.argmin of each module's options
        return float(mins.sum() - p.slo * lam.sum()), mins, val, arg, lat[p.rows, arg]

    def ascend(self, lam: np.ndarray, alive: np.ndarray, iters: int) -> tuple[float, np.ndarray, np.ndarray]:
        """Projected subgradient ascent with Polyak steps towards the incumbent; reduced-cost fixing at
        every step (``alive`` is narrowed in place). Returns the best bound, its lambda and the argmin
        configurations there (a column per module). (The Lagrangian of :meth:`lagrangian`, inlined:
        this loop is most of a solve.)"""
        p = self.p
        incidence, slo, rows = p.incidence, p.slo, p.rows
        sq2, cap2, beta2, d2 = p.sq2, p.cap2, p.beta2, p.d2
        best_lb, best_lam, best_arg = -math.inf, lam, np.zeros(p.n, dtype=int)
        theta, stall = 1.0, 0
        fixing = math.isfinite(self.best_cost)
        cut = self.best_cost * (1 - REL_TOL)  # (no leaf is tried within an ascent: it stays)
        dead = ~alive
        for _ in range(iters):
            mu = lam @ incidence
            x = np.minimum(sq2 * (1.0 / np.sqrt(np.maximum(mu, 1e-200)))[:, None], cap2)
            lat = d2 + x
            val = beta2 / x + mu[:, None] * lat
            np.copyto(val, np.inf, where=dead)
            mins = val.min(axis=1)
            arg = val.argmin(axis=1)
            lb = float(mins.sum() - slo * lam.sum())
            if not math.isfinite(lb):
                return math.inf, lam, best_arg
            if fixing:
                # configuration k of module m held: L - min_m + val_k; drop it if that reaches the incumbent
                drop = val >= (cut - lb) + mins[:, None]
                if drop.any():
                    alive &= ~drop
                    dead |= drop
            if lb > best_lb + 1e-12 * abs(lb):
                # the argmins survive the fixing (one dropped would mean lb reached the incumbent)
                best_lb, best_lam, stall, best_arg = lb, lam.copy(), 0, arg
            else:
                stall += 1
                if stall >= 4:
                    theta, stall = theta / 2, 0
            if best_lb >= cut:
                break
            g = incidence @ lat[rows, arg] - slo
            g[(lam <= 0) & (g < 0)] = 0.0
            norm = float(g @ g)
            if norm <= 1e-30:
                break
            target = self.best_cost if fixing else abs(lb) * 1.1 + 1.0
            lam = np.maximum(0.0, lam + (theta * max(target - lb, 1e-9 * abs(lb)) / norm) * g)
        return best_lb, best_lam, best_arg

    # ----------------------------------------------------------------- branching

    def node(self, lam: np.ndarray, alive: np.ndarray, depth: int) -> None:
        p = self.p
        self.nodes += 1
        if self.should_stop is not None and self.nodes % 8 == 0 and self.should_stop():
            self.stopped = True
        if self.stopped:
            lb, *_ = self.lagrangian(lam, alive)
            self.open_bound = min(self.open_bound, lb)
            return
        lb, lam, arg = self.ascend(lam, alive, self.ROOT_ITERS if depth == 0 else self.NODE_ITERS)
        if lb >= self.best_cost * (1 - REL_TOL):
            return
        counts = alive.sum(axis=1)
        if (counts == 0).any():
            return
        if alive[p.rows, arg].all():
            self.leaf([p.flat_index(m, int(j)) for m, j in enumerate(arg)], lam)  # often the optimum
        if (counts == 1).all():
            self.leaf([p.flat_index(m, int(j)) for m, j in enumerate(alive.argmax(axis=1))], lam)
            return
        free = [m for m in range(p.n) if counts[m] > 1]
        m = min(free, key=lambda j: (counts[j], j))
        at, mins, val, _, _ = self.lagrangian(lam, alive)
        cols = np.flatnonzero(alive[m])
        for k in cols[np.argsort(val[m, cols], kind="stable")]:
            # the child's bound at this lambda, against the incumbent as the siblings left it
            if at - mins[m] + val[m, k] >= self.best_cost * (1 - REL_TOL):
                continue
            child = alive.copy()
            child[m] = False
            child[m, k] = True
            self.node(lam, child, depth + 1)


def dual_split(
    beta: np.ndarray,
    u: np.ndarray,
    a: np.ndarray,
    room: np.ndarray,
    stop_at: float = math.inf,
    start: np.ndarray | None = None,
) -> tuple[list[float] | None, float] | None:
    """min sum beta / x  s.t.  a x <= room, 0 < x <= u (one configuration per module fixed), by projected
    Newton ascent on its dual: D(lambda) = sum_m min_{0 < x <= u} (beta / x + mu x) - lambda room, mu =
    lambda a, whose inner minimum is x = min(u, sqrt(beta / mu)), continuous in mu, so D is C1 and
    concave. Returns (x made feasible, the best dual value) when the gradient vanishes, (None, bound)
    as soon as a dual value reaches ``stop_at``, or None when it does not converge."""
    n_paths = len(room)
    if (room <= 0).any():
        return None, math.inf
    if (a @ u <= room).all():  # every module on its flat cost fits: lambda = 0 is optimal
        return [float(v) for v in u], float((beta / u).sum())
    sq = np.sqrt(beta)
    lam = (a @ sq / room) ** 2 / max(1, n_paths) if start is None or not start.any() else start.copy()
    best = -math.inf
    x = u
    stalled = False
    for _ in range(60):
        mu = lam @ a
        with np.errstate(divide="ignore"):
            free = sq < u * np.sqrt(np.where(mu > 0, mu, 0.0))  # sqrt(beta / mu) < u
            x = np.where(free, sq / np.sqrt(np.where(free, mu, 1.0)), u)
        dual = float((beta / x + mu * x).sum() - lam @ room)
        best = max(best, dual)
        if best >= stop_at * (1 - REL_TOL):
            return None, best
        g = a @ x - room
        active = (lam > 0) | (g > 0)
        if stalled:  # the Newton step made no progress (a singular active set): release paths with room
            active = g > 0
        scale = float(np.abs(room).max())
        if not active.any() or float(np.abs(g[active]).max()) <= 1e-13 * scale:
            if (g <= 1e-13 * scale).all():
                return _scaled(x, a, room), best
        dx = np.where(free, -0.5 * sq / np.where(free, mu, 1.0) ** 1.5, 0.0)
        h = (a * dx) @ a.T  # negative semidefinite
        # paths whose free modules give no curvature: lambda to 0 if the path has room, else up to where
        # its first module leaves its flat cost (mu = beta / u^2)
        flat = np.abs(h).sum(axis=1) <= 1e-300
        direction = np.where(active, 0.0, -lam)  # released paths: lambda to 0
        for p in np.flatnonzero(flat & active):
            if g[p] < 0:
                direction[p] = -lam[p]
            else:
                on = a[p] > 0
                direction[p] = float((beta[on] / u[on] ** 2 - mu[on]).min()) * (1 + 1e-9) + 1e-12
        idx = np.flatnonzero(active & ~flat)
        if idx.size:
            direction[idx] = _newton_direction(h[np.ix_(idx, idx)], g[idx], lam[idx])
        alpha, base = 1.0, dual
        for _ in range(30):
            trial = np.maximum(0.0, lam + alpha * direction)
            mu2 = trial @ a
            with np.errstate(divide="ignore"):
                x2 = np.minimum(u, sq / np.sqrt(np.where(mu2 > 0, mu2, 0.0)))
            if float((beta / x2 + mu2 * x2).sum() - trial @ room) >= base - 1e-15 * abs(base):
                break
            alpha /= 2
        else:
            return None
        stalled = float(np.abs(trial - lam).max()) <= 1e-12 * max(1.0, float(lam.max()))
        lam = trial
    return None


def _newton_direction(h: np.ndarray, g: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """The dual's Newton direction on its active paths (``h`` their Hessian, negative semidefinite, ``g``
    the gradient, ``lam`` the multipliers). Where ``h`` is singular (paths whose free modules are the
    same, e.g. two branches that differ only in modules at their flat cost) the dual is linear along
    its null space: the step follows the gradient's part there up to where the first multiplier reaches
    0 (a Newton step alone would leave it, and the ascent would creep)."""
    w, v = np.linalg.eigh(h)
    coef = v.T @ g
    big = np.abs(w) > 1e-10 * float(np.abs(w).max(initial=0.0))
    step: np.ndarray = -(v[:, big] @ (coef[big] / w[big]))
    null = v[:, ~big] @ coef[~big]
    size = float(np.abs(null).max(initial=0.0))
    if size > 1e-12 * max(1.0, float(np.abs(g).max())):
        down = null < -1e-15 * size
        reach = float((lam[down] / -null[down]).min()) if down.any() else float(lam.max() + 1.0) / size
        step = step + reach * null
    return step


def _scaled(x: np.ndarray, a: np.ndarray, room: np.ndarray) -> list[float]:
    """x shrunk where a path exceeds its room by rounding (as :mod:`planner.convex` does)."""
    factor = np.ones_like(x)
    for p in range(len(room)):
        s = float(a[p] @ x)
        if s > room[p]:
            on = a[p] > 0
            factor[on] = np.minimum(factor[on], room[p] / s * (1 - 1e-12))
    return [float(v) for v in x * factor]


def solve_occupancy(
    cands: Sequence[Sequence[Config]],
    rates: Sequence[float],
    paths: Sequence[Sequence[int]],
    slo: float,
    lmax: Sequence[float],
    starts: Sequence[Sequence[Config]] = (),
    should_stop: Callable[[], bool] | None = None,
) -> OccupancyResult:
    """Exact occupancy optimum over one configuration per module from ``cands`` (each module's
    configurations with a floor below its largest budget ``lmax``). ``starts``: configuration choices
    (one per module, e.g. the previous epoch's) tried first as incumbents; those not in ``cands`` are
    ignored."""
    cands = [[c for c in cs if c.floor < lmax[m]] for m, cs in enumerate(cands)]  # the others never fit
    if any(not cs for cs in cands):
        return OccupancyResult(None, None, math.inf, math.inf, 0, 0, True)
    prob = _Problem(cands, rates, paths, slo, lmax)
    search = _Search(prob, should_stop)
    index = {(m, c): int(prob.start[m]) + j for m, cs in enumerate(prob.cands) for j, c in enumerate(cs)}
    for start in starts:
        found = [index.get((m, c)) for m, c in enumerate(start)]
        pick = [k for k in found if k is not None]
        if len(pick) == prob.n:
            search.leaf(pick)
    search.node(np.zeros(len(prob.paths)), prob.valid.copy(), 0)
    finished = not search.stopped
    bound = search.best_cost if finished else min(search.open_bound, search.best_cost)
    if search.best is None:
        return OccupancyResult(None, None, math.inf, bound, search.nodes, search.leaves, finished)
    best, x = search.best
    return OccupancyResult(
        [prob.configs[k] for k in best], x, search.best_cost, bound, search.nodes, search.leaves, finished
    )


# --------------------------------------------------------------------------- one option per module


@dataclass
class ChoiceResult:
    """The cheapest choice of one option per module (indices into each module's list) found, its cost,
    a certified lower bound and whether the search finished."""

    pick: list[int] | None
    cost: float
    lower_bound: float
    nodes: int
    finished: bool


class _Choice:
    """Branch and bound choosing one (latency, cost) option per module so every path's latency sum is
    at most the SLO: the Lagrangian of the path constraints bounds every node (per module
    min_j cost_j + mu_m lat_j, the same dual ascent and reduced-cost fixing as for occupancy); it
    branches on the module least decided (its two best Lagrangian values closest)."""

    ROOT_ITERS, NODE_ITERS = 60, 10  # dual ascent steps at the root and at every other node

    def __init__(
        self,
        options: Sequence[Sequence[tuple[float, float]]],
        paths: Sequence[Sequence[int]],
        slo: float,
        should_stop: Callable[[], bool] | None,
    ):
        self.n = len(options)
        self.paths = _maximal(paths)
        self.slo = slo
        self.sizes = [len(o) for o in options]
        self.start = np.cumsum([0, *self.sizes])[:-1]
        self.mod = np.repeat(np.arange(self.n), self.sizes)
        self.lat = np.array([lat for o in options for lat, _ in o], dtype=float)
        self.cost = np.array([c for o in options for _, c in o], dtype=float)
        self.incidence = np.zeros((len(self.paths), self.n))
        for p, path in enumerate(self.paths):
            self.incidence[p, path] = 1.0
        # the options as (n, K) tables, one row per module (K: the most options of a module), padded
        # with zeros; ``valid`` marks the real entries and ``cell`` each flat option's entry
        width = max(self.sizes, default=1)
        self.valid = np.arange(width)[None, :] < np.array(self.sizes)[:, None]
        self.cell = np.flatnonzero(self.valid.ravel())
        self.rows = np.arange(self.n)
        self.lat2 = np.zeros((self.n, width))
        self.cost2 = np.zeros((self.n, width))
        self.lat2[self.valid] = self.lat
        self.cost2[self.valid] = self.cost
        self.limit = slo + 1e-9
        self.should_stop = should_stop
        self.best_cost = math.inf
        self.best: list[int] | None = None
        self.nodes = 0
        self.stopped = False
        self.open_bound = math.inf

    def offer(self, pick: Sequence[int]) -> None:
        """Record a choice (flat indices) if it fits every path and is the cheapest so far."""
        lat = self.lat[list(pick)]
        if (self.incidence @ lat <= self.limit).all():
            cost = float(self.cost[list(pick)].sum())
            if cost < self.best_cost - 1e-9:
                self.best_cost, self.best = cost, [int(k) for k in pick]

    def repair(self, pick: list[int], alive: np.ndarray) -> None:
        """From ``pick``, move modules of the most overrun path to faster alive options, cheapest cost per
        second saved first, until every path fits (an incumbent for the search)."""
        pick = list(pick)
        for _ in range(4 * len(self.lat)):
            over = self.incidence @ self.lat[pick] - self.limit
            p = int(np.argmax(over))
            if over[p] <= 0:
                self.offer(pick)
                return
            move: tuple[float, int, int] | None = None
            for m in self.paths[p]:
                k = pick[m]
                for j in range(int(self.start[m]), int(self.start[m]) + self.sizes[m]):
                    saved = self.lat[k] - self.lat[j]
                    if alive[j] and saved > 1e-12:
                        rate = (self.cost[j] - self.cost[k]) / min(saved, over[p])
                        if move is None or rate < move[0]:
                            move = (float(rate), m, j)
            if move is None:
                return
            pick[move[1]] = move[2]

    def lagrangian(
        self, lam: np.ndarray, alive: np.ndarray
    ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """L(lambda) over the alive options (``alive``: an (n, K) mask, one row per module, padded);
        per module its minimum, per option its value, per module its first argmin (a column)."""
        mu = lam @ self.incidence
        val = np.where(alive, self.cost2 + mu[:, None] * self.lat2, np.inf)
        mins = val.min(axis=1)
        return float(mins.sum() - self.slo * lam.sum()), mins, val, val.argmin(axis=1)

    def flat(self, cols: np.ndarray) -> list[int]:
        """Flat option indices of one column per module."""
        return [int(s) + int(j) for s, j in zip(self.start, cols, strict=True)]

    def ascend(
        self, lam: np.ndarray, alive: np.ndarray, iters: int
    ) -> tuple[float, np.ndarray, np.ndarray | None]:
        incidence, slo, rows, cost2, lat2 = self.incidence, self.slo, self.rows, self.cost2, self.lat2
        best_lb, best_lam = -math.inf, lam
        best_arg: np.ndarray | None = None
        theta, stall = 1.0, 0
        fixing = math.isfinite(self.best_cost)
        cut = self.best_cost - 1e-9  # (no choice is offered within an ascent: it stays)
        dead = ~alive
        for _ in range(iters):
            mu = lam @ incidence
            val = cost2 + mu[:, None] * lat2
            np.copyto(val, np.inf, where=dead)
            mins = val.min(axis=1)
            arg = val.argmin(axis=1)
            lb = float(mins.sum() - slo * lam.sum())
            if not math.isfinite(lb):
                return math.inf, lam, arg
            if fixing:
                drop = val >= (cut - lb) + mins[:, None]
                if drop.any():
                    alive &= ~drop
                    dead |= drop
            if lb > best_lb + 1e-12 * abs(lb):
                best_lb, best_lam, best_arg, stall = lb, lam.copy(), arg, 0
            else:
                stall += 1
                if stall >= 4:
                    theta, stall = theta / 2, 0
            if best_lb >= cut:
                break
            g = incidence @ lat2[rows, arg] - slo
            g[(lam <= 0) & (g < 0)] = 0.0
            norm = float(g @ g)
            if norm <= 1e-30:
                break
            target = self.best_cost if fixing else abs(lb) * 1.1 + 1.0
            lam = np.maximum(0.0, lam + (theta * max(target - lb, 1e-9 * abs(lb)) / norm) * g)
        return best_lb, best_lam, best_arg

    def node(self, lam: np.ndarray, alive: np.ndarray, depth: int) -> None:
        self.nodes += 1
        if self.should_stop is not None and self.nodes % 8 == 0 and self.should_stop():
            self.stopped = True
        if self.stopped:
            self.open_bound = min(self.open_bound, self.lagrangian(lam, alive)[0])
            return
        lb, lam, arg = self.ascend(lam, alive, self.ROOT_ITERS if depth == 0 else self.NODE_ITERS)
        if lb >= self.best_cost - 1e-9:
            return
        counts = alive.sum(axis=1)
        if (counts == 0).any():
            return
        if arg is not None and alive[self.rows, arg].all():
            self.repair(self.flat(arg), alive.ravel()[self.cell])
        if (counts == 1).all():
            self.offer(self.flat(alive.argmax(axis=1)))
            return
        at, mins, val, _ = self.lagrangian(lam, alive)
        # branch on the module least decided: the smallest gap between its two best Lagrangian values
        two = np.partition(val, 1, axis=1)
        gap = np.where(counts > 1, two[:, 1] - two[:, 0], np.inf)
        m = int(np.argmin(gap))
        cols = np.flatnonzero(alive[m])
        for k in cols[np.argsort(val[m, cols], kind="stable")]:
            if at - mins[m] + val[m, k] >= self.best_cost - 1e-9:
                continue
            child = alive.copy()
            child[m] = False
            child[m, k] = True
            self.node(lam, child, depth + 1)


def solve_choice(
    options: Sequence[Sequence[tuple[float, float]]],
    paths: Sequence[Sequence[int]],
    slo: float,
    incumbent: Sequence[int] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> ChoiceResult:
    """The cheapest choice of one (latency, cost) option per module with every path's latency sum at
    most ``slo`` (+1e-9), exact unless ``should_stop`` ends the search. ``incumbent``: a choice (an index
    per module) to start from, e.g. the previous epoch's."""
    search = _Choice(options, paths, slo, should_stop)
    if any(z == 0 for z in search.sizes):
        return ChoiceResult(None, math.inf, math.inf, 0, True)
    if incumbent is not None:
        search.offer([int(s) + k for s, k in zip(search.start, incumbent, strict=True)])
    search.node(np.zeros(len(search.paths)), search.valid.copy(), 0)
    finished = not search.stopped
    bound = search.best_cost if finished else min(search.open_bound, search.best_cost)
    pick = None
    if search.best is not None:
        pick = [k - int(s) for k, s in zip(search.best, search.start, strict=True)]
    return ChoiceResult(pick, search.best_cost, bound, search.nodes, finished)
