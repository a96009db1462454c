"""The schedule's period and each machine's windows per period."""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["MAX_WINDOWS", "choose_period"]


#: Upper bound on windows per period (keeps the schedule small enough to cache and to store).
MAX_WINDOWS = 50_000

#: Candidate periods searched when the rates have no small exact hyperperiod.
_PERIOD_MULTIPLES = 64


# --------------------------------------------------------------------------- period and counts
#
# Plain Python on a handful of groups: numpy costs microseconds per call on 1-3 element arrays, and the
# period search evaluates up to 65 periods. The figures are the same floats numpy gave (same operations
# in the same order; sums of fewer than 8 terms are sequential in numpy too, longer ones go through it).


def _sum(xs: list[float]) -> float:
    """``np.sum`` of ``xs``, bit for bit (sequential below 8 terms, numpy's pairwise sum above)."""
    if len(xs) >= 8:
        return float(np.sum(np.array(xs, dtype=np.float64)))
    acc = 0.0
    for x in xs:
        acc += x
    return acc


def _floor(x: float) -> float:
    return float(math.floor(x)) if math.isfinite(x) else x


def _counts(
    lam: list[float], cap: list[float], machines: list[int], batch: list[int], period: float
) -> tuple[list[int], int]:
    """Windows per machine per period: ceil(lam * P) capped at the throughput (at least one); a shortfall
    left by the caps is moved to groups with spare throughput, lowest in TC order first. Also returns the
    windows per period before that move, a lower bound on the total that never decreases with ``P``."""
    counts: list[float] = []
    limit: list[float] = []
    for x, c in zip(lam, cap, strict=True):
        hi = _floor(c * period + 1e-7)
        n = max(min(float(math.ceil(x * period - 1e-7)), hi), 1.0)
        counts.append(n)
        limit.append(max(hi, n))
    base = sum(int(n) * m for n, m in zip(counts, machines, strict=True))
    short = _sum([x * period * m * b for x, m, b in zip(lam, machines, batch, strict=True)]) - _sum(
        [n * m * b for n, m, b in zip(counts, machines, batch, strict=True)]
    )
    for g in reversed(range(len(counts))):
        while short > 1e-7 * batch[g] and counts[g] < limit[g]:
            counts[g] += 1
            short -= float(machines[g] * batch[g])
    return [int(n) for n in counts], base


@functools.lru_cache(maxsize=4096)
def _as_fraction(x: float) -> Fraction | None:
    """``x`` as a fraction with denominator <= 10^6, if it is one (to 1e-9 relative)."""
    fr = Fraction(x).limit_denominator(1_000_000)
    if fr <= 0 or abs(float(fr) - x) > 1e-9 * x:
        return None
    return fr


def _rational_period(lam: list[float]) -> float | None:
    """Smallest P with lam * P integral for every group, if the rates are (close to) rationals."""
    acc: Fraction | None = None
    for x in lam:
        fr = _as_fraction(x)
        if fr is None:
            return None
        period = 1 / fr  # P must be a multiple of 1 / lam
        acc = period if acc is None else _lcm_fraction(acc, period)
    return None if acc is None else float(acc)


def _lcm_fraction(a: Fraction, b: Fraction) -> Fraction:
    num = math.lcm(a.numerator * b.denominator, b.numerator * a.denominator)
    return Fraction(num, a.denominator * b.denominator)


def choose_period(
    lam: list[float], cap: list[float], machines: list[int], batch: list[int]
) -> tuple[float, list[int]]:
    """The period: the exact hyperperiod when it is small enough, else the multiple of the longest batch
    interval with the smallest rate shortfall, then the smallest per-machine rate error, then fewest
    windows.

    The multiples are tried in increasing order and the search stops as soon as no later one can win:
    the windows before the shortfall move (``_counts``'s lower bound) never decrease with the period, so
    once it exceeds :data:`MAX_WINDOWS`, or reaches the window count of a best period that is already
    exact (no shortfall, no error), every later multiple would lose or be skipped. The result is the one
    of the full search."""
    if len(lam) == 1:
        return _choose_period_one(lam[0], cap[0], machines[0], batch[0])
    p_min = max(1.0 / x for x in lam)
    multiples = (p_min * m for m in range(1, _PERIOD_MULTIPLES + 1))  # made as the search reaches them
    exact = _rational_period(lam)
    first: list[float] = []
    if exact is not None and exact * _sum([x * m for x, m in zip(lam, machines, strict=True)]) <= MAX_WINDOWS:
        first.append(exact)
    first_multiple = len(first)
    candidates = itertools.chain(first, multiples)
    if len(lam) < 8:  # sums of fewer than 8 terms are sequential: the evaluation fused in plain loops
        return _best_period_few(lam, cap, machines, batch, candidates, first_multiple)
    best: tuple[tuple[float, float, int], float, list[int]] | None = None
    for pos, period in enumerate(candidates):
        counts, base = _counts(lam, cap, machines, batch, period)
        if best is not None and pos >= first_multiple:
            if base > MAX_WINDOWS or (best[0][:2] == (0.0, 0.0) and base >= best[0][2]):
                break
        total = sum(n * m for n, m in zip(counts, machines, strict=True))
        if total > MAX_WINDOWS and best is not None:
            continue
        ideal = [x * period for x in lam]
        served = sum(n * m * b for n, m, b in zip(counts, machines, batch, strict=True))
        planned = _sum([i * m * b for i, m, b in zip(ideal, machines, batch, strict=True)])
        shortfall = max(0.0, 1.0 - served / planned)
        err = max(abs(n - i) / i for n, i in zip(counts, ideal, strict=True))
        key = (round(shortfall, 12), round(err, 9), total)
        if best is None or key < best[0]:
            best = (key, period, counts)
    assert best is not None
    return best[1], best[2]


def _best_period_few(
    lam: list[float],
    cap: list[float],
    machines: list[int],
    batch: list[int],
    candidates: Iterable[float],
    first_multiple: int,
) -> tuple[float, list[int]]:
    """The loop of :func:`choose_period` for 2 to 7 groups, with :func:`_counts` inlined and each
    candidate's sums taken in the same pass: the same operations in the same order (a sum of fewer than
    8 terms is sequential from ``0.0``, as :func:`_sum` takes it; the planned requests ``x P m b`` are
    the same products in ``_counts`` and in the key), so the same period and counts."""
    groups = list(zip(lam, cap, machines, batch, strict=True))
    width = range(len(groups) - 1, -1, -1)
    best: tuple[tuple[float, float, int], float, list[int]] | None = None
    for pos, period in enumerate(candidates):
        counts: list[float] = []
        limit: list[float] = []
        ideal: list[float] = []
        base = 0
        planned = have = 0.0
        for x, c, m, b in groups:
            hi = _floor(c * period + 1e-7)
            n = max(min(float(math.ceil(x * period - 1e-7)), hi), 1.0)
            counts.append(n)
            limit.append(max(hi, n))
            base += int(n) * m
            i = x * period
            ideal.append(i)
            planned += i * m * b
            have += n * m * b
        if best is not None and pos >= first_multiple:
            if base > MAX_WINDOWS or (best[0][:2] == (0.0, 0.0) and base >= best[0][2]):
                break
        short = planned - have
        for g in width:  # the shortfall move of _counts
            while short > 1e-7 * batch[g] and counts[g] < limit[g]:
                counts[g] += 1
                short -= float(machines[g] * batch[g])
        whole = [int(n) for n in counts]
        total = served = 0
        for n, m, b in zip(whole, machines, batch, strict=True):
            total += n * m
            served += n * m * b
        if total > MAX_WINDOWS and best is not None:
            continue
        shortfall = max(0.0, 1.0 - served / planned)
        err = max(abs(n - i) / i for n, i in zip(whole, ideal, strict=True))
        key = (round(shortfall, 12), round(err, 9), total)
        if best is None or key < best[0]:
            best = (key, period, whole)
    assert best is not None
    return best[1], best[2]


def _choose_period_one(lam: float, cap: float, machines: int, batch: int) -> tuple[float, list[int]]:
    """:func:`choose_period` of one group (most schedules), on scalars: the same candidates, the same
    IEEE operations in the same order (a one-term ``_sum`` is ``0.0 + x``, i.e. ``x`` for the positive
    terms here; ``max`` of one error is that error), so the same period and counts."""
    exact = _rational_period([lam])
    first: list[float] = []
    if exact is not None and exact * (lam * machines) <= MAX_WINDOWS:
        first.append(exact)
    p_min = 1.0 / lam
    best: tuple[tuple[float, float, int], float, int] | None = None
    for pos, period in enumerate(
        itertools.chain(first, (p_min * m for m in range(1, _PERIOD_MULTIPLES + 1)))
    ):
        # _counts, one group
        hi = _floor(cap * period + 1e-7)
        n = max(min(float(math.ceil(lam * period - 1e-7)), hi), 1.0)
        limit = max(hi, n)
        base = int(n) * machines
        short = lam * period * machines * batch - n * machines * batch
        while short > 1e-7 * batch and n < limit:
            n += 1
            short -= float(machines * batch)
        count = int(n)
        if best is not None and pos >= len(first):
            if base > MAX_WINDOWS or (best[0][:2] == (0.0, 0.0) and base >= best[0][2]):
                break
        total = count * machines
        if total > MAX_WINDOWS and best is not None:
            continue
        ideal = lam * period
        served = count * machines * batch
        planned = ideal * machines * batch
        shortfall = max(0.0, 1.0 - served / planned)
        err = abs(count - ideal) / ideal
        key = (round(shortfall, 12), round(err, 9), total)
        if best is None or key < best[0]:
            best = (key, period, count)
    assert best is not None
    return best[1], [best[2]]
