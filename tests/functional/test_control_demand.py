# ruff: noqa: F811 - the fixtures imported from the epoch tests are the tests' parameters
"""Planning from real demand (issue #28, item 2): a flood of requests the front refuses does not
raise the planned rate (moto CloudWatch, the real control loop)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from core.adapters.rates import DEFAULT_SHED_CAP
from tests.functional.test_control_epoch import SPEC, clients, env  # noqa: F401 - fixtures

if TYPE_CHECKING:
    from tests.functional.test_control_epoch import Env

pytestmark = pytest.mark.functional


def steady(env: Env) -> float:
    """SPEC published and observed at its registered 20 frames/s: the planned rate."""
    env.register(SPEC)
    assert env.ctl.run_epoch().status == "published"
    env.frames("cams", 20.0)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    assert out.status == "unchanged", out.as_json()
    return float(out.rates["cams"]["planned"])


def test_a_flood_of_refused_requests_does_not_move_the_plan_when_planning_from_admitted_frames(
    env: Env,
) -> None:
    planned = steady(env)
    env.ctl.rates.shed_cap = 0.0  # SKINFLINT_SHED_DEMAND_CAP=0: admitted frames alone
    before = env.desired()
    # WHEN one key floods at 30 x the plan and the front refuses nearly all of it (503 over_planned_rate)
    env.frames("cams", 20.0, shed=600.0)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    # THEN the observed and planned rates are those of the admitted frames: nothing changes
    assert out.rates["cams"]["observed"] == pytest.approx(20.0)
    assert out.rates["cams"]["planned"] == pytest.approx(planned)
    assert out.status == "unchanged" and env.desired() == before


def test_by_default_refusals_raise_the_observed_rate_by_at_most_the_cap(env: Env) -> None:
    steady(env)
    env.frames("cams", 20.0, shed=600.0)  # 30 x the plan refused
    env.clock.t += 60
    out = env.ctl.run_epoch()
    # 20 accepted + min(600, 1.5 x 20 = 30) shed = 50 frames/s, not 620
    assert out.rates["cams"]["observed"] == pytest.approx(20.0 * (1 + DEFAULT_SHED_CAP))
    assert out.rates["cams"]["observed"] < 620.0 / 10


def test_a_published_modules_queues_hold_a_dead_workers_messages_no_longer_than_needed(env: Env) -> None:
    # item 9 of issue #28: what a crashed worker held stays invisible (and counts as backlog at the
    # front) until the visibility timeout ends; SLO 0.5 s + 2 x <= 0.05 s + linger 1 s + 5 s -> the 10 s floor
    env.register(SPEC)
    out = env.ctl.run_epoch()
    dep = env.ctl.plans.deployment(out.version, "cams")
    assert dep is not None
    timeouts = {
        env.clients["sqs"].get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])[
            "Attributes"
        ]["VisibilityTimeout"]
        for urls in dep.queues.values()
        for url in urls.values()
    }
    assert timeouts == {str(env.ctl.config.min_visibility_s)} == {"10"}
