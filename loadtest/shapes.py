"""Locust ``LoadTestShape``s: steady, ramp, diurnal, burst (the curves are in :mod:`loadtest.rates`).

Each reads its parameters from the environment (``SKINFLINT_RATE`` frames/s per app at the peak,
``SKINFLINT_DURATION_S``, ``SKINFLINT_APPS_N``, ``SKINFLINT_DRAIN_S``, ``SKINFLINT_FPS_PER_USER``;
``SKINFLINT_FRAMES_PER_POST`` sets the cameras' POSTs, not the shape),
which ``skinflint loadtest`` sets. Locust runs the first shape class it finds in a locustfile, so
``loadtest/locustfile.py`` exposes only :class:`SelectedShape` (picked by ``SKINFLINT_SHAPE``); a
locustfile of your own can import one of the named shapes instead.
"""

from __future__ import annotations

from dataclasses import replace

from locust import LoadTestShape

from loadtest.rates import LoadPlan

__all__ = ["BurstShape", "DiurnalShape", "RampShape", "SelectedShape", "SteadyShape"]


class _PlanShape(LoadTestShape):
    abstract = True
    shape: str | None = None  # None: the one SKINFLINT_SHAPE names

    def __init__(self) -> None:
        # locust ships py.typed but leaves LoadTestShape.__init__ and get_run_time unannotated
        super().__init__()  # type: ignore[no-untyped-call]
        plan = LoadPlan.from_env()
        self.plan = plan if self.shape is None else replace(plan, shape=self.shape)

    def tick(self) -> tuple[int, float] | None:
        run_time: float = self.get_run_time()  # type: ignore[no-untyped-call]
        return self.plan.tick(run_time)


class SteadyShape(_PlanShape):
    """The peak rate for the whole run."""

    shape = "steady"


class RampShape(_PlanShape):
    """10 % of the peak rising linearly to the peak."""

    shape = "ramp"


class DiurnalShape(_PlanShape):
    """One day compressed into the run: trough 10 %, peak at half time."""

    shape = "diurnal"


class BurstShape(_PlanShape):
    """The peak rate with bursts of twice it (20 % of each quarter of the run)."""

    shape = "burst"


class SelectedShape(_PlanShape):
    """The shape named by ``SKINFLINT_SHAPE`` (steady, ramp, diurnal, burst)."""

    shape = None
