"""Rate limiters of the front's admission (front/admission.py): a token bucket (a key's requests, a
key's GETs) and the generic cell-rate algorithm that paces frames to a rate with a burst tolerance."""

from __future__ import annotations

import math

__all__ = ["Gcra", "TokenBucket"]


class TokenBucket:
    """``rate`` tokens/s up to ``burst``; :meth:`take` returns 0 when granted, else the wait in s."""

    def __init__(self, rate: float, burst: float, now: float):
        self.rate = rate
        self.burst = max(burst, 1.0)
        self.tokens = self.burst
        self.updated = now
        self.last_take = now

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def take(self, count: float, now: float) -> float:
        self._refill(now)
        self.last_take = now
        if count <= self.tokens:
            self.tokens -= count
            return 0.0
        if count > self.burst:
            return math.inf
        return (count - self.tokens) / self.rate


class Gcra:
    """Generic cell-rate algorithm (virtual scheduling): at most ``rate`` frames/s, a frame may be
    ``tolerance_s`` ahead of the pace (so ``floor(tolerance * rate) + 1`` frames at once). A request
    of ``n`` frames passes when its first frame is on time and moves the pace on by all ``n`` (a
    JSON batch larger than the burst is not refused for ever; the frames after it wait instead)."""

    def __init__(self, rate: float, tolerance_s: float):
        self.interval = 1.0 / rate
        self.tolerance_s = tolerance_s
        self.tat = -math.inf  # theoretical arrival time of the next frame

    def check(self, frames: int, now: float) -> tuple[float, float]:
        """(wait, new tat): ``wait`` is 0 when ``frames`` frames may pass now (commit with :meth:`commit`)."""
        tat = max(self.tat, now)
        ahead = tat - now
        if ahead > self.tolerance_s + 1e-12:
            return ahead - self.tolerance_s, self.tat
        return 0.0, tat + frames * self.interval

    def commit(self, tat: float) -> None:
        self.tat = tat
