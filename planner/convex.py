"""Exact continuous latency split for the occupancy objective, one configuration per module fixed.

With config k fixed, module m's occupancy cost at latency budget l is max(T/r, b/(r (l - d))):
dummy load tops the rate up to b / (l - d) when the budget is tight. With x = l - d the problem is

    minimise  sum_m beta_m / min(x_m, u_m)     (beta = b / r, u = b / T)
    s.t.      sum_{m in P} x_m <= S_P  for every root-to-leaf path P   (S_P = SLO - sum d)

a separable convex programme. One path: water-filling in closed form. Several paths: a
log-barrier interior-point method (Newton steps, duality gap below 1e-11 of the cost), then a
final scaling that makes every path feasible.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Sequence

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
        mine = _fill_price([beta[j] for j in shared], [u[j] for j in shared], y)
        theirs = sum(
            _fill_price([beta[j] for j in t], [u[j] for j in t], r - y)
            for t, r in zip(tails, room, strict=True)
        )
        return mine - theirs

    lo, hi = 0.0, min(room)
    hi = min(hi, sum(u[j] for j in shared))
    if gap(hi * (1 - 1e-15)) > 0:  # the shared part still wants more at its cap
        y = hi * (1 - 1e-15) if hi < min(room) else hi * (1 - 1e-9)
    else:
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if gap(mid) > 0:
                lo = mid
            else:
                hi = mid
            if hi - lo <= 1e-15 * hi:
                break
        y = 0.5 * (lo + hi)
    x = [0.0] * n
    for j, v in zip(shared, _water_fill([beta[j] for j in shared], [u[j] for j in shared], y), strict=True):
        x[j] = v
    for t, r in zip(tails, room, strict=True):
        for j, v in zip(t, _water_fill([beta[j] for j in t], [u[j] for j in t], r - y), strict=True):
            x[j] = v
    return x


def _barrier_newton(beta: np.ndarray, u: np.ndarray, A: np.ndarray, room: np.ndarray) -> np.ndarray:
    """Interior-point (log-barrier Newton) solve of min sum beta/x s.t. A x <= room, 0 < x <= u."""
    n = len(beta)
    cap = np.minimum(u, (room / A.sum(axis=1)).min(initial=np.inf) * np.ones(n))
    for p in range(A.shape[0]):
        on = A[p] > 0
        cap[on] = np.minimum(cap[on], room[p] / on.sum())
    x = 0.5 * cap
    m = 2 * n + A.shape[0]
    t = max(1.0, m / max(float((beta / x).sum()), 1e-12))

    def phi(x: np.ndarray, t: float) -> float:
        s = room - A @ x
        if (s <= 0).any() or (x <= 0).any() or (x >= u).any():
            return math.inf
        return float(t * (beta / x).sum() - np.log(s).sum() - np.log(u - x).sum() - np.log(x).sum())

    while True:
        for _ in range(60):
            s = room - A @ x
            grad = -t * beta / x**2 + A.T @ (1 / s) + 1 / (u - x) - 1 / x
            hess = np.diag(2 * t * beta / x**3 + 1 / (u - x) ** 2 + 1 / x**2) + (A.T * (1 / s**2)) @ A
            step = -np.linalg.solve(hess, grad)
            dec = float(-grad @ step)
            if dec / 2 <= 1e-10:
                break
            # fraction to the boundary: the largest step that keeps x strictly inside
            a = 1.0
            ds = A @ step
            for num, den in ((s, ds), (u - x, step), (x, -step)):
                pos = den > 0
                if pos.any():
                    a = min(a, 0.99 * float((num[pos] / den[pos]).min()))
            f0 = phi(x, t)
            while phi(x + a * step, t) > f0 - 0.25 * a * dec and a > 1e-14:
                a *= 0.5
            x = x + a * step
        if m / t <= 1e-10 * float((beta / x).sum()):
            return np.asarray(x)
        t *= 50.0


def split_convex(
    beta: Sequence[float],
    u: Sequence[float],
    paths: Sequence[Sequence[int]],
    room: Sequence[float],
) -> list[float] | None:
    """Optimal x (latency above duration) per module; ``room[p]`` = S_P. None if a path has no room."""
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
    A = np.zeros((len(paths), n))
    for p, path in enumerate(paths):
        A[p, list(path)] = 1.0
    # a cap never binds beyond the whole room, so clip u to keep the barrier well scaled
    uu = np.array(
        [min(u[j], min(room[p] for p, path in enumerate(paths) if j in path) * 1.5) for j in range(n)]
    )
    x = [
        float(v) for v in _barrier_newton(np.asarray(beta, dtype=float), uu, A, np.asarray(room, dtype=float))
    ]
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
    beta: Sequence[float], u: Sequence[float], paths: Sequence[Sequence[int]], room: Sequence[float]
) -> float:
    """A lower bound on the optimum: keep only one path's constraint (the best such relaxation)."""
    flat = sum(b / uu for b, uu in zip(beta, u, strict=True))
    best = flat
    for p, path in enumerate(paths):
        if room[p] <= 0:
            return math.inf
        x = _water_fill([beta[j] for j in path], [u[j] for j in path], room[p])
        cost = flat + sum(beta[j] / xj - beta[j] / u[j] for j, xj in zip(path, x, strict=True))
        best = max(best, cost)
    return best
