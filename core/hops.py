"""The hop delay histogram the workers emit and the control loop reads (issue #24 item 3).

A worker puts, for every task it receives for the first time, its delivery time (received - enqueued:
the SQS send, delivery and receive that bring a module its requests) twice: as ``HopDelayMs`` (the
value: its statistics show the mean and the maximum) and as one count of ``HopDelayBucket`` whose
dimension ``UpToMs`` names the smallest bound of :data:`BOUNDS_MS` the delay does not exceed (``inf``
above the last). CloudWatch keeps statistic sets, not values, so it cannot give a percentile of
``HopDelayMs`` (a percentile needs the raw values; moto, the local stack's CloudWatch, has none at all);
the per-bucket counts can: :func:`quantile_ms` is exact up to the grid, rounded up (a safe bound).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["BOUNDS_MS", "BUCKET_METRIC", "DELAY_METRIC", "bucket_label", "quantile_ms"]

DELAY_METRIC = "HopDelayMs"
BUCKET_METRIC = "HopDelayBucket"
#: ms: upper bounds of the buckets (5 ms steps where an SQS hop usually lies, coarser above)
BOUNDS_MS: tuple[float, ...] = (
    5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 60, 70, 80, 90, 100, 120, 150, 200, 250, 300, 400, 500,
    750, 1000, 2000, 5000,
)  # fmt: skip


def bucket_label(delay_ms: float) -> str:
    """``UpToMs`` of a delay: the smallest bound >= it (``"inf"`` above the last)."""
    for bound in BOUNDS_MS:
        if delay_ms <= bound:
            return f"{bound:g}"
    return "inf"


def quantile_ms(counts: Mapping[str, float], q: float = 0.99) -> tuple[int, float]:
    """(samples, the ``q`` quantile in ms rounded up to its bucket's bound) of per-bucket counts
    (``UpToMs`` label -> count); ``inf`` when it lies above the last bound, 0 with no samples."""
    total = int(round(sum(counts.values())))
    if total <= 0:
        return 0, 0.0
    need = math.ceil(q * total - 1e-9)  # the rank of the q quantile among the sorted delays
    seen = 0.0
    for bound in BOUNDS_MS:
        seen += counts.get(f"{bound:g}", 0.0)
        if seen >= need - 1e-9:
            return total, float(bound)
    return total, math.inf
