"""The planner's two schedules: the epoch every minute, and the backlog check every minute with the
event ``control/service.py`` routes to ``Controller.check_backlog`` (which also activates a
new version once its slots are served)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from cdk import constants as C
from cdk.stacks.control import BACKLOG_EVENT
from control.service import BACKLOG_CHECK
from tests.infra.conftest import resources

if TYPE_CHECKING:
    from tests.infra.conftest import Assembly

pytestmark = pytest.mark.infra


def _planner_targets(assembly: Assembly) -> list[tuple[str, dict[str, object]]]:
    """(schedule expression, target) of every rule of the control stack that invokes the planner."""
    doc = assembly.template(C.CONTROL_STACK)
    planner = next(
        k
        for k, v in resources(doc, "AWS::Lambda::Function").items()
        if v["Properties"]["Handler"] == C.PLANNER_HANDLER
    )
    out = []
    for rule in resources(doc, "AWS::Events::Rule").values():
        props = rule["Properties"]
        for target in props["Targets"]:
            if target["Arn"] == {"Fn::GetAtt": [planner, "Arn"]}:
                out.append((props["ScheduleExpression"], target))
    return out


def test_the_backlog_check_runs_every_minute_besides_the_epoch(assembly: Assembly) -> None:
    got = _planner_targets(assembly)
    assert sorted(expr for expr, _ in got) == ["rate(1 minute)", "rate(1 minute)"]
    epoch = [t for _, t in got if "Input" not in t]
    checks = [json.loads(str(t["Input"])) for _, t in got if "Input" in t]
    assert len(epoch) == 1  # the schedule's own event: an epoch
    # the check's event is the one the handler routes to the backlog check
    assert checks == [BACKLOG_EVENT] and BACKLOG_EVENT["source"] == BACKLOG_CHECK
    for _, target in got:
        assert target["RetryPolicy"]["MaximumRetryAttempts"] == 0  # the next minute's run replaces it
        assert target["RetryPolicy"]["MaximumEventAgeInSeconds"] == 60
