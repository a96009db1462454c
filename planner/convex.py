"""Exact continuous latency split for the occupancy objective, one configuration per module fixed.

With config k fixed, module m's occupancy cost at latency budget l is max(T/r, b/(r (l - d))), d here
the configuration's latency floor (device time plus its latency-only overhead, d + o: see
:mod:`planner.latency`): dummy load tops the rate up to b / (l - d) when the budget is tight. With
x = l - d the problem is

    minimise  sum_m beta_m / min(x_m, u_m)     (beta = b / r, u = b / T)
    s.t.      sum_{m in P} x_m <= S_P  for every root-to-leaf path P   (S_P = SLO - sum d)

a separable convex programme. One path: water-filling in closed form. Several paths: a
log-barrier interior-point method (Newton steps, duality gap below 1e-11 of the cost), then a
final scaling that makes every path feasible.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["path_lower_bound", "split_convex"]


def _water_fill(beta: Sequence[float], u: Sequence[float], budget: float) -> list[float]:
    """min sum beta_j / x_j s.t. sum x_j <= budget, 0 < x_j <= u_j (one path)."""
    if sum(u) <= budget:
        return list(u)
    capped: set[int] = set()
    while True:
        free = [j for j in range(len(beta)) if j not in capped]
        room = budget - sum(u[j] for j in capped)
        scale = room / sum(math.sqrt(beta[j]) for j in free)  # x_j = sqrt(beta_j) * scale
        over = [j for j in free if math.sqrt(beta[j]) * scale > u[j]]
        if not over:
            x = list(u)
            for j in free:
                x[j] = math.sqrt(beta[j]) * scale
            return x
        capped.update(over)


def _fill_price(beta: Sequence[float], u: Sequence[float], budget: float) -> float:
    """The water-filling multiplier: minus the derivative of the one-path optimum in its budget."""
    x = _water_fill(beta, u, budget)
    free = [b / xj**2 for b, xj, uj in zip(beta, x, u, strict=True) if xj < uj * (1 - 1e-12)]
    return max(free, default=0.0)


def _shared_split(
    beta: Sequence[float], u: Sequence[float], paths: Sequence[Sequence[int]], room: Sequence[float]
) -> list[float] | None:
    """Exact split when every module lies on all paths (the shared part) or on exactly one (a tail),
    e.g. a fork (detector -> two classifiers) or a join. With y the shared part's latency the cost
    is WF_shared(y) + sum_P WF_P(S_P - y), convex in y; its derivative vanishes where the shared
    part's water-filling price equals the sum of the tails' prices, found by bisection."""
    n = len(beta)
    shared = [j for j in range(n) if all(j in p for p in paths)]
    tails = [[j for j in p if j not in shared] for p in paths]
    counts = [sum(j in p for p in paths) for j in range(n)]
    if not shared or any(c not in (1, len(paths)) for c in counts) or any(not t for t in tails):
        return None

    def gap(y: float) -> float:
        """log(shared price) - log(sum of tail prices): decreasing in y, smooth (prices ~ 1/y^2)."""
        mine = _fill_price([beta[j] for j in shared], [u[j] for j in shared], y)
        theirs = sum(
            _fill_price([beta[j] for j in t], [u[j] for j in t], r - y)
            for t, r in zip(tails, room, strict=True)
        )
        if mine <= 0:
            return -math.inf
        if theirs <= 0:
            return math.inf
        return math.log(mine) - math.log(theirs)

    hi = min(min(room) * (1 - 1e-12), sum(u[j] for j in shared))
    y = hi if gap(hi) >= 0 else _root_decreasing(gap, 0.0, hi)
    x = [0.0] * n
    for j, v in zip(shared, _water_fill([beta[j] for j in shared], [u[j] for j in shared], y), strict=True):
        x[j] = v
    for t, r in zip(tails, room, strict=True):
        for j, v in zip(t, _water_fill([beta[j] for j in t], [u[j] for j in t], r - y), strict=True):
            x[j] = v
    return x


def _gauss(a: list[list[float]], b: list[float]) -> list[float]:
    """Solve a x = b for a small symmetric positive definite a (Cholesky, pure Python)."""
    n = len(b)
    low = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1):
            s = a[i][j] - sum(low[i][k] * low[j][k] for k in range(j))
            low[i][j] = math.sqrt(max(s, 1e-300)) if i == j else s / low[j][j]
    y = [0.0] * n
    for i in range(n):
        y[i] = (b[i] - sum(low[i][k] * y[k] for k in range(i))) / low[i][i]
    x = [0.0] * n
    for i in range(n - 1, -1, -1):
        x[i] = (y[i] - sum(low[k][i] * x[k] for k in range(i + 1, n))) / low[i][i]
    return x


class _Barrier:
    """min sum beta/x s.t. path sums <= room, 0 < x <= u, by a log barrier with weight t."""

    def __init__(
        self, beta: Sequence[float], u: Sequence[float], paths: Sequence[Sequence[int]], room: Sequence[float]
    ):
        self.beta, self.u, self.paths, self.room = beta, u, paths, room
        self.n = len(beta)

    def slack(self, x: list[float]) -> list[float]:
        return [self.room[p] - sum(x[j] for j in path) for p, path in enumerate(self.paths)]

    def phi(self, x: list[float], t: float) -> float:
        if any(xj <= 0 or xj >= uj for xj, uj in zip(x, self.u, strict=True)):
            return math.inf
        slack = self.slack(x)
        if min(slack) <= 0:
            return math.inf
        total = sum(
            t * b / xj - math.log(uj - xj) - math.log(xj)
            for b, xj, uj in zip(self.beta, x, self.u, strict=True)
        )
        return total - sum(math.log(s) for s in slack)

    def newton_step(self, x: list[float], t: float) -> tuple[list[float], float]:
        """The Newton direction and the Newton decrement squared."""
        n, beta, u = self.n, self.beta, self.u
        grad = [-t * beta[j] / x[j] ** 2 + 1 / (u[j] - x[j]) - 1 / x[j] for j in range(n)]
        hess = [[0.0] * n for _ in range(n)]
        for j in range(n):
            hess[j][j] = 2 * t * beta[j] / x[j] ** 3 + 1 / (u[j] - x[j]) ** 2 + 1 / x[j] ** 2
        for path, s in zip(self.paths, self.slack(x), strict=True):
            for j in path:
                grad[j] += 1 / s
                for k in path:
                    hess[j][k] += 1 / s**2
        step = _gauss(hess, [-g for g in grad])
        return step, -sum(g * d for g, d in zip(grad, step, strict=True))

    def max_step(self, x: list[float], step: list[float]) -> float:
        """Fraction to the boundary: the largest step keeping x strictly inside."""
        a = 1.0
        for xj, uj, dj in zip(x, self.u, step, strict=True):
            if dj > 0:
                a = min(a, 0.99 * (uj - xj) / dj)
            elif dj < 0:
                a = min(a, 0.99 * xj / -dj)
        for path, s in zip(self.paths, self.slack(x), strict=True):
            ds = sum(step[j] for j in path)
            if ds > 0:
                a = min(a, 0.99 * s / ds)
        return a

    def center(self, x: list[float], t: float) -> list[float]:
        for _ in range(50):
            step, dec = self.newton_step(x, t)
            if dec / 2 <= 1e-10:
                break
            a, f0 = self.max_step(x, step), self.phi(x, t)
            while (
                a > 1e-14
                and self.phi([xj + a * dj for xj, dj in zip(x, step, strict=True)], t) > f0 - 0.25 * a * dec
            ):
                a *= 0.5
            x = [xj + a * dj for xj, dj in zip(x, step, strict=True)]
        return x


def _root_decreasing(f: Callable[[float], float], lo: float, hi: float) -> float:
    """Root of a decreasing f on (lo, hi) with f(lo+) > 0 > f(hi): Illinois regula falsi, with a
    bisection step whenever an end is infinite or the interpolant leaves the bracket."""
    flo, fhi = math.inf, f(hi)
    side = 0
    for _ in range(200):
        if hi - lo <= 1e-14 * hi:
            break
        if math.isfinite(flo) and math.isfinite(fhi):
            mid = hi - fhi * (hi - lo) / (fhi - flo)
            if not lo < mid < hi:
                mid = 0.5 * (lo + hi)
        else:
            mid = 0.5 * (lo + hi)
        fm = f(mid)
        if fm == 0:
            return mid
        if fm > 0:
            lo, flo = mid, fm
            if side == -1 and math.isfinite(fhi):
                fhi *= 0.5
            side = -1
        else:
            hi, fhi = mid, fm
            if side == 1 and math.isfinite(flo):
                flo *= 0.5
            side = 1
    return 0.5 * (lo + hi)


def _barrier_newton(
    beta: Sequence[float], u: Sequence[float], paths: Sequence[Sequence[int]], room: Sequence[float]
) -> list[float]:
    """Interior-point solve (log barrier, Newton centering, t x 100 per stage) to a duality gap
    below 1e-10 of the cost. Pure Python: the systems have a handful of variables, where numpy's
    per-call overhead would dominate."""
    bar = _Barrier(beta, u, paths, room)
    n, m = len(beta), 2 * len(beta) + len(paths)
    x = [
        0.5 * min(u[j], *(room[p] / len(path) for p, path in enumerate(paths) if j in path)) for j in range(n)
    ]
    t = max(1.0, m / sum(b / xx for b, xx in zip(beta, x, strict=True)))
    while True:
        x = bar.center(x, t)
        if m / t <= 1e-10 * sum(b / xx for b, xx in zip(beta, x, strict=True)):
            return x
        t *= 100.0


def split_convex(
    beta: Sequence[float],
    u: Sequence[float],
    paths: Sequence[Sequence[int]],
    room: Sequence[float],
) -> list[float] | None:
    """Optimal x (latency above the floor d + o) per module; ``room[p]`` = S_P. None if a path has no room."""
    if any(r <= 0 for r in room):
        return None
    n = len(beta)
    if len(paths) == 1:
        x = [0.0] * n
        sub = _water_fill([beta[j] for j in paths[0]], [u[j] for j in paths[0]], room[0])
        for j, v in zip(paths[0], sub, strict=True):
            x[j] = v
        for j in range(n):
            if j not in paths[0]:
                x[j] = u[j]
        return x
    shared = _shared_split(beta, u, paths, room)
    if shared is not None:
        return _feasible(shared, paths, room)
    # a cap never binds beyond the whole room, so clip u to keep the barrier well scaled
    uu = [min(u[j], min(room[p] for p, path in enumerate(paths) if j in path) * 1.5) for j in range(n)]
    x = _barrier_newton(beta, uu, paths, room)
    x = [min(v, u[j]) for j, v in enumerate(x)]
    return _feasible(x, paths, room)


def _feasible(x: list[float], paths: Sequence[Sequence[int]], room: Sequence[float]) -> list[float]:
    n = len(x)
    # make every path feasible (a no-op at convergence, a guard against the last ulp)
    factor = [1.0] * n
    for p, path in enumerate(paths):
        s = sum(x[j] for j in path)
        if s > room[p]:
            for j in path:
                factor[j] = min(factor[j], room[p] / s * (1 - 1e-12))
    return [x[j] * factor[j] for j in range(n)]


def path_lower_bound(
    beta: Sequence[float],
    u: Sequence[float],
    paths: Sequence[Sequence[int]],
    room: Sequence[float],
    stop_at: float = math.inf,
    pairs: bool = True,
) -> float:
    """A lower bound on the optimum from relaxations that keep one path's constraint, then (if
    still below ``stop_at``) two paths' constraints — both solved exactly."""
    flat = sum(b / uu for b, uu in zip(beta, u, strict=True))

    def cost_of(x: Sequence[float], mods: Sequence[int]) -> float:
        return flat + sum(beta[j] / min(x[k], u[j]) - beta[j] / u[j] for k, j in enumerate(mods))

    best = flat
    for p, path in enumerate(paths):
        if room[p] <= 0:
            return math.inf
        best = max(best, cost_of(_water_fill([beta[j] for j in path], [u[j] for j in path], room[p]), path))
    if best >= stop_at or len(paths) < 3 or not pairs:
        return best
    for p, q in itertools.combinations(range(len(paths)), 2):
        mods = sorted(set(paths[p]) | set(paths[q]))
        local = {j: k for k, j in enumerate(mods)}
        sub_paths = [[local[j] for j in paths[p]], [local[j] for j in paths[q]]]
        x = _shared_split([beta[j] for j in mods], [u[j] for j in mods], sub_paths, [room[p], room[q]])
        if x is not None:
            best = max(best, cost_of(x, mods))
            if best >= stop_at:
                return best
    return best
