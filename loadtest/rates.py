"""Load shapes as pure functions of time (no locust import: locust monkey-patches on import, so the
CLI and the unit tests use this module, and :mod:`loadtest.shapes` wraps it in ``LoadTestShape``s).

A load test offers ``rate`` frames/s per app at its peak. Users are cameras: each produces
``fps_per_user`` frames/s and posts them ``N`` at a time (:meth:`LoadPlan.per_post`: one POST every
``N / fps_per_user`` seconds holding its last ``N`` frames) at its own random phase, so the offered
rate of an app at time ``t`` is ``users(t) * fps_per_user`` with
``users(t) = round(rate * f(t / duration) / fps_per_user)`` and ``f`` the shape's fraction of the peak:

- ``steady``: 1;
- ``ramp``: 0.1 -> 1, linear over the run;
- ``diurnal``: one day compressed into the run, ``0.1 + 0.9 (1 - cos 2 pi x) / 2`` (trough 10 %,
  peak at half time);
- ``burst``: 1, and ``burst_factor`` (default 2) during the first 20 % of each quarter of the run.

After ``duration`` the shape keeps 0 users for ``drain_s`` so the results of the last frames are
collected, then ends the test.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.ids import MAX_FRAMES_PER_POST

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["SHAPES", "LoadPlan", "auto_frames_per_post", "burst", "diurnal", "ramp", "steady"]

MAX_USERS_PER_APP = 50  # cameras per app at the peak; more frames/s go to faster cameras
BURST_FACTOR = 2.0


def auto_frames_per_post(rate: float, slo_s: float) -> int:
    """Frames per POST by default: those that arrive in half the SLO at ``rate`` frames/s, 1 to 10
    (``skinflint demo``'s rule, ``skinflint.commands.demo.auto_frames_per_post``: a POST arrives as
    a burst, and much more than that does not fit the plan's windows within the SLO)."""
    return max(1, min(MAX_FRAMES_PER_POST, int(rate * slo_s / 2)))


def steady(progress: float) -> float:
    return 1.0


def ramp(progress: float) -> float:
    return 0.1 + 0.9 * min(max(progress, 0.0), 1.0)


def diurnal(progress: float) -> float:
    return 0.1 + 0.9 * (1.0 - math.cos(2.0 * math.pi * progress)) / 2.0


def burst(progress: float, factor: float = BURST_FACTOR) -> float:
    phase = (progress * 4.0) % 1.0
    return factor if phase < 0.2 else 1.0


SHAPES: dict[str, Callable[[float], float]] = {
    "steady": steady,
    "ramp": ramp,
    "diurnal": diurnal,
    "burst": burst,
}


@dataclass(frozen=True)
class LoadPlan:
    """What a load test offers: ``rate`` frames/s per app at the peak for ``duration_s`` seconds."""

    shape: str
    rate: float  # frames/s per app at the peak (steady: throughout)
    duration_s: float
    apps: int = 1  # user classes (apps) running; users are spread evenly over them
    drain_s: float = 10.0  # s with no users after the run, to collect the last results
    fps_per_user: float = 0.0  # frames/s per camera; 0: rate / min(ceil(rate), MAX_USERS_PER_APP)
    frames_per_post: int = 0  # frames per POST, 1-10; 0: per app, auto_frames_per_post(fps, SLO)

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"unknown shape {self.shape!r} (known: {', '.join(SHAPES)})")
        if self.rate <= 0 or self.duration_s <= 0 or self.apps < 1 or self.drain_s < 0:
            raise ValueError("rate and duration must be positive, apps at least 1, drain not negative")
        if not 0 <= self.frames_per_post <= MAX_FRAMES_PER_POST:
            raise ValueError(f"frames per POST must be 1 to {MAX_FRAMES_PER_POST} (0: by the SLO)")

    @property
    def fps(self) -> float:
        """Frames/s of one camera."""
        if self.fps_per_user > 0:
            return self.fps_per_user
        return self.rate / min(math.ceil(self.rate), MAX_USERS_PER_APP)

    def per_post(self, slo_s: float) -> int:
        """Frames one camera of an app with SLO ``slo_s`` sends per POST: ``frames_per_post``, or by
        default the frames of half the SLO at the camera's rate (:func:`auto_frames_per_post`)."""
        return self.frames_per_post or auto_frames_per_post(self.fps, slo_s)

    def post_interval_s(self, slo_s: float) -> float:
        """Seconds between one camera's POSTs: ``per_post / fps``."""
        return self.per_post(slo_s) / self.fps

    def fraction(self, elapsed_s: float) -> float:
        return SHAPES[self.shape](elapsed_s / self.duration_s)

    def users_per_app(self, elapsed_s: float) -> int:
        """Cameras per app at run time ``elapsed_s`` (at least one while the run lasts)."""
        if elapsed_s >= self.duration_s:
            return 0
        return max(1, round(self.rate * self.fraction(elapsed_s) / self.fps))

    def tick(self, elapsed_s: float) -> tuple[int, float] | None:
        """``LoadTestShape.tick``: (users, spawn rate) at run time ``elapsed_s``; None when the test ends."""
        if elapsed_s >= self.duration_s + self.drain_s:
            return None
        users = self.users_per_app(elapsed_s) * self.apps
        if users == 0:
            # the drain: locust stops users at the spawn rate too, so stop them all within ~1 s (at a
            # rate of 1 user/s, 40 cameras went on posting through the drain and their last frames,
            # killed unread at the end, counted as lost)
            return 0, float(max(self.apps, round(self.rate * BURST_FACTOR / self.fps) * self.apps))
        return users, float(max(users, self.apps, 1))  # every change takes effect within ~1 s

    def offered_rate(self, elapsed_s: float) -> float:
        """Frames/s per app offered at ``elapsed_s`` (what the users produce once spawned)."""
        return self.users_per_app(elapsed_s) * self.fps

    def expected_frames(self, step_s: float = 0.5) -> float:
        """Frames per app the run should offer (integral of :meth:`offered_rate`)."""
        steps = max(1, math.ceil(self.duration_s / step_s))
        dt = self.duration_s / steps
        return sum(self.offered_rate((step + 0.5) * dt) * dt for step in range(steps))

    def to_env(self) -> dict[str, str]:
        return {
            "SKINFLINT_SHAPE": self.shape,
            "SKINFLINT_RATE": repr(self.rate),
            "SKINFLINT_DURATION_S": repr(self.duration_s),
            "SKINFLINT_APPS_N": str(self.apps),
            "SKINFLINT_DRAIN_S": repr(self.drain_s),
            "SKINFLINT_FPS_PER_USER": repr(self.fps),
            "SKINFLINT_FRAMES_PER_POST": str(self.frames_per_post),
        }

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LoadPlan:
        env_vars = os.environ if env is None else env
        return cls(
            shape=env_vars.get("SKINFLINT_SHAPE", "steady"),
            rate=float(env_vars.get("SKINFLINT_RATE", "4")),
            duration_s=float(env_vars.get("SKINFLINT_DURATION_S", "60")),
            apps=int(env_vars.get("SKINFLINT_APPS_N", "1")),
            drain_s=float(env_vars.get("SKINFLINT_DRAIN_S", "10")),
            fps_per_user=float(env_vars.get("SKINFLINT_FPS_PER_USER", "0")),
            frames_per_post=int(env_vars.get("SKINFLINT_FRAMES_PER_POST", "0")),
        )
