"""A day of diurnal load over many apps, re-planned every epoch, run through the simulator (pure, seeded).

docs/scale.md has the method and the measured figures. In short:

- **Load** (:func:`make_load`): ``apps`` apps, each one of the demo application DAGs, with Zipf rate shares,
  a smooth diurnal curve per app (night trough, morning ramp, midday plateau, evening peak; each app shifted
  by up to +-1.5 h), AR(1) log-normal noise per minute and a flash crowd on a few apps (``burst_factor`` x
  for ``burst_minutes``). Rates are per minute; the total's busiest minute of the day is ``peak_rps``
  frames/s exactly. The minutes before midnight are generated too, as the history of the first epochs.
- **Adaptive** (:func:`run_adaptive`): at the start of every epoch each app's rate to plan for is
  :func:`~planner.scaling.forecast_rate` of the epoch means observed so far (trend + headroom, quantised);
  :func:`~planner.fleet.plan_fleet` plans and packs every app (previous plans and fleet passed in, so an
  unchanged app keeps its plan and its slots); :class:`~planner.scaling.Hysteresis` turns the packed
  instance counts into the counts that are paid for.
- **Static** (:func:`run_static`): one fleet planned at every app's largest forecast of the day (the same
  forecaster and headroom: the day's peak forecast), held all day.
- **Oracle** (:func:`run_oracle`, cost only): every epoch planned at each app's true busiest minute (on the
  forecast's rate grid), no headroom, no hysteresis: what re-planning would cost with perfect foresight.
- **Serving an epoch** (:func:`serve_epoch`): admission control sheds the frames above the plan's capacity
  (the smallest over modules of planned rate / requests per frame), minute by minute (fluid accounting).
  The admitted minutes are simulated at two load levels, the epoch's median and busiest minute rounded up on
  a grid of the capacity (:func:`load_levels`), ``sample_s`` seconds each; a minute's admitted frames are
  within the SLO in the proportion the simulator measured at its level (fraction of root-to-leaf path
  instances within the SLO). Simulations are memoised (:class:`SimCache`), solves too (:class:`SolveCache`).

What is not simulated: instance boot and model load times at a plan change, the transition between two
epochs' plans, co-location waits on shared instances (the packer's bound covers them; the simulator runs
each app on its own machines), queue state carried across epochs, network hops.

Parts: :mod:`~bench.scenario.config` (settings, app templates), :mod:`~bench.scenario.load` (the day's
load), :mod:`~bench.scenario.serving` (an epoch served, the caches), :mod:`~bench.scenario.report` (the
records) and :mod:`~bench.scenario.day` (the strategies and the scenario).
"""

from __future__ import annotations

from bench.errors import ScenarioError
from bench.scenario.config import MINUTES_PER_DAY, AppTemplate, LoadConfig, PolicyConfig
from bench.scenario.day import run_adaptive, run_oracle, run_scenario, run_static, total_steps
from bench.scenario.load import DayLoad, diurnal_shape, make_load
from bench.scenario.report import EpochRecord, ScenarioReport, StrategyResult, SweepPoint
from bench.scenario.serving import (
    Runner,
    Served,
    SimCache,
    SimOutcome,
    SimTask,
    SolveCache,
    load_levels,
    plan_capacity,
    serve_epoch,
    simulate_task,
)

__all__ = [
    "AppTemplate",
    "DayLoad",
    "EpochRecord",
    "LoadConfig",
    "MINUTES_PER_DAY",
    "PolicyConfig",
    "Runner",
    "ScenarioError",
    "ScenarioReport",
    "Served",
    "SimCache",
    "SimOutcome",
    "SimTask",
    "SolveCache",
    "StrategyResult",
    "SweepPoint",
    "diurnal_shape",
    "load_levels",
    "make_load",
    "plan_capacity",
    "run_adaptive",
    "run_oracle",
    "run_scenario",
    "run_static",
    "serve_epoch",
    "simulate_task",
    "total_steps",
]
