"""Latency models fitted to measurements.

- Nexus's batch model (Shen et al., SOSP'19, Eq. 1): ``d(b) = alpha * b + beta``: ``beta`` is the
  fixed cost of one invocation, ``alpha`` the cost of each request in the batch.
- HiTDL's resource model (Eq. 1): ``L(n) = c0 + c1/n + c2/n^2`` for ``n`` CPU cores, with
  ``c0, c1, c2 >= 0`` so the latency never grows with more cores.

Both are fitted in relative error, because the planner cares about a 10% error at batch 1 as much
as at batch 32. The linear model minimises the *largest* relative error (a Chebyshev fit: the
criterion the profile's quality target is stated in, and the one a latency budget needs: no point
is under-predicted by more than the reported error); HiTDL's is a least-squares fit weighted by
1/measured.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

__all__ = ["HitdlFit", "LinearFit", "fit_hitdl", "fit_linear"]


@dataclass(frozen=True)
class LinearFit:
    """``d(b) = alpha_s * b + beta_s``; ``max_rel_err`` / ``mean_rel_err`` over the fitted points."""

    alpha_s: float
    beta_s: float
    max_rel_err: float
    mean_rel_err: float

    def predict(self, batch: float) -> float:
        return self.alpha_s * batch + self.beta_s

    def as_dict(self) -> dict[str, float]:
        return {
            "alpha_s": self.alpha_s,
            "beta_s": self.beta_s,
            "max_rel_err": self.max_rel_err,
            "mean_rel_err": self.mean_rel_err,
        }


def _rel_errors(pred: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    err = np.abs(pred - y) / y
    return float(err.max()), float(err.mean())


def _nnls_small(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares by enumerating active sets (fine for <= 4 unknowns)."""
    k = a.shape[1]
    best: tuple[float, np.ndarray] | None = None
    for r in range(k, 0, -1):
        for cols in itertools.combinations(range(k), r):
            sub = a[:, cols]
            coef, *_ = np.linalg.lstsq(sub, y, rcond=None)
            if np.any(coef < 0):
                continue
            full = np.zeros(k)
            full[list(cols)] = coef
            res = float(np.sum((a @ full - y) ** 2))
            if best is None or res < best[0] - 1e-18:
                best = (res, full)
    return best[1] if best is not None else np.zeros(k)


def _minimax_linear(b: np.ndarray, d: np.ndarray) -> tuple[float, float]:
    """``alpha, beta >= 0`` minimising ``max_i |alpha*b_i + beta - d_i| / d_i``.

    The problem is a linear programme in (alpha, beta, t): minimise t subject to
    ``+-(alpha*b_i + beta - d_i) <= t*d_i`` and ``alpha, beta >= 0``. An optimum sits on a vertex where
    three constraints are tight; with at most a few dozen points, enumerating the vertices is exact
    and cheaper than an LP solver dependency."""
    rows: list[tuple[float, float, float, float]] = []  # a*alpha + c*beta - e*t <= rhs
    for bi, di in zip(b, d, strict=True):
        rows.append((bi, 1.0, di, di))
        rows.append((-bi, -1.0, di, -di))
    rows += [(-1.0, 0.0, 0.0, 0.0), (0.0, -1.0, 0.0, 0.0)]
    a = np.array([[row[0], row[1], -row[2]] for row in rows])
    rhs = np.array([row[3] for row in rows])
    best: tuple[float, float, float] | None = None
    for idx in itertools.combinations(range(len(rows)), 3):
        m = a[list(idx)]
        if abs(np.linalg.det(m)) < 1e-15:
            continue
        x = np.linalg.solve(m, rhs[list(idx)])
        if np.all(a @ x <= rhs + 1e-12 * (1 + np.abs(rhs))) and (best is None or x[2] < best[2]):
            best = (float(x[0]), float(x[1]), float(x[2]))
    if best is None:  # degenerate input (cannot happen with two distinct positive batches)
        raise ValueError("no linear fit exists for these points")
    return max(best[0], 0.0), max(best[1], 0.0)


def fit_linear(batches: list[int] | np.ndarray, durations: list[float] | np.ndarray) -> LinearFit:
    """Fit ``d(b) = alpha*b + beta`` (alpha, beta >= 0) minimising the largest relative error.

    One point gives ``alpha = d/b, beta = 0``. Raises ValueError on empty or non-positive input."""
    b = np.asarray(batches, dtype=float)
    d = np.asarray(durations, dtype=float)
    if b.size == 0 or b.size != d.size or np.any(d <= 0) or np.any(b <= 0):
        raise ValueError("fit_linear needs matching, positive batches and durations")
    if np.unique(b).size == 1:
        alpha, beta = float(np.mean(d / b)), 0.0
    else:
        alpha, beta = _minimax_linear(b, d)
    mx, mean = _rel_errors(alpha * b + beta, d)
    return LinearFit(float(alpha), float(beta), mx, mean)


@dataclass(frozen=True)
class HitdlFit:
    """``L(n) = c0 + c1/n + c2/n^2``. ``degenerate`` is True when fewer than three distinct core counts
    were measured: then ``c2`` is fixed to 0 (Amdahl's form ``c0 + c1/n``), which is the most
    conservative choice for extrapolating to more cores (a positive c2 would only predict faster)."""

    c0: float
    c1: float
    c2: float
    max_rel_err: float
    degenerate: bool

    def predict(self, n: float) -> float:
        return self.c0 + self.c1 / n + self.c2 / (n * n)

    def as_dict(self) -> dict[str, float | bool]:
        return {
            "c0": self.c0,
            "c1": self.c1,
            "c2": self.c2,
            "max_rel_err": self.max_rel_err,
            "degenerate": self.degenerate,
        }


def fit_hitdl(cores: list[float] | np.ndarray, latencies: list[float] | np.ndarray) -> HitdlFit:
    """Fit HiTDL's ``L(n) = c0 + c1/n + c2/n^2`` with non-negative constants (relative error)."""
    n = np.asarray(cores, dtype=float)
    y = np.asarray(latencies, dtype=float)
    if n.size == 0 or n.size != y.size or np.any(n <= 0) or np.any(y <= 0):
        raise ValueError("fit_hitdl needs matching, positive core counts and latencies")
    w = 1.0 / y
    distinct = np.unique(n).size
    if distinct >= 3:
        coef = _nnls_small(np.column_stack([w, w / n, w / n**2]), np.ones_like(y))
    elif distinct == 2:
        c0, c1 = _nnls_small(np.column_stack([w, w / n]), np.ones_like(y))
        coef = np.array([c0, c1, 0.0])
    else:  # one core count: assume no speed-up from more cores (conservative)
        coef = np.array([float(np.mean(y)), 0.0, 0.0])
    c0, c1, c2 = (float(value) for value in coef)
    mx, _ = _rel_errors(c0 + c1 / n + c2 / n**2, y)
    return HitdlFit(c0, c1, c2, mx, degenerate=distinct < 3)
