"""An unavailable class is unavailable (moto): a group at its MaxSize is planned with no more than it
has, a group with MaxSize 0 and a class whose launches EC2 refused on a quota are left out, and
``skinflint status`` says so."""

from __future__ import annotations

import copy
import datetime as dt
import json
import time
from typing import Any

import pytest

from control.problems import machine_count
from tests.functional.test_control_epoch import ASGS, SPEC, Env, clients, env  # noqa: F401 - fixtures

pytestmark = pytest.mark.functional


def slow_cpu_spec(rate: float) -> dict[str, Any]:
    # a slow CPU detector (b1 at 0.2 s: 5 frames/s a c6i.large) makes the t4 (b4 at 0.02 s: 200/s) cheaper
    spec = copy.deepcopy(SPEC) | {"rate": rate}
    spec["profiles"]["det-net"][2]["duration_s"] = 0.2
    return spec


def set_group(env: Env, hw: str, max_size: int, desired: int) -> None:  # noqa: F811
    env.clients["autoscaling"].update_auto_scaling_group(
        AutoScalingGroupName=ASGS[hw], MinSize=0, MaxSize=max_size, DesiredCapacity=desired
    )


def t4_machines(env: Env, version: int) -> int:  # noqa: F811
    dep = env.ctl.plans.deployment(version, "cams")
    assert dep is not None
    return sum(machine_count(dep.plan, "t4").values())


def test_a_group_at_its_max_size_is_planned_with_no_more_than_it_has(
    env: Env,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN at 400 frames/s the plan wants several t4 machines (and room for CPUs: MaxSize 500)
    set_group(env, "c6i.large", max_size=500, desired=0)
    env.register(slow_cpu_spec(400.0))
    first = env.ctl.run_epoch()
    assert first.version is not None and t4_machines(env, first.version) >= 2, first.counts
    assert not first.limited_hardware
    # WHEN the t4 group is at its MaxSize of 1 (a limit below the plan)
    set_group(env, "t4", max_size=1, desired=1)
    env.register(slow_cpu_spec(401.0))  # a new revision: the app is solved again
    env.clock.t += 60
    out = env.ctl.run_epoch()
    # THEN the class is unavailable for new capacity: at most 1 t4 machine, the rest on CPUs
    assert out.status == "published" and out.version is not None, out.as_json()
    assert t4_machines(env, out.version) <= 1
    assert out.counts.get("t4", 0) <= 1 and out.counts["c6i.large"] > first.counts.get("c6i.large", 0)
    assert "at its MaxSize 1" in out.limited_hardware["t4"]
    # (the group still clamps the 3 t4 of the version served until this one activates: a warning)
    # AND skinflint status says so
    from skinflint.cli import main

    assert main(["status"]) == 0
    assert "no new capacity: t4 (at its MaxSize 1" in " ".join(capsys.readouterr().out.split())
    assert main(["status", "--json"]) == 0
    assert "t4" in json.loads(capsys.readouterr().out)["last_epoch"]["limited_hardware"]


def test_a_group_with_max_size_zero_is_left_out(env: Env, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    env.register(slow_cpu_spec(40.0))
    first = env.ctl.run_epoch()
    assert first.counts.get("t4", 0) > 0, first.counts
    set_group(env, "t4", max_size=0, desired=0)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    assert out.status == "published" and out.counts.get("t4", 0) == 0 and out.counts["c6i.large"] > 0
    assert "MaxSize 0" in out.excluded_hardware["t4"]
    from skinflint.cli import main

    assert main(["status"]) == 0
    assert "unavailable (left out): t4 (Auto Scaling group" in " ".join(capsys.readouterr().out.split())


class QuotaRefusals:
    """The Auto Scaling client, except that t4 launches fail on the account's vCPU quota."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def describe_scaling_activities(self, **kw: Any) -> dict[str, Any]:
        if kw["AutoScalingGroupName"] != ASGS["t4"]:
            return {"Activities": []}
        return {
            "Activities": [
                {
                    "StatusCode": "Failed",
                    "StartTime": dt.datetime.now(dt.UTC),
                    "StatusMessage": "You have requested more vCPU capacity than your current vCPU limit of 0 "
                    "allows for the instance bucket that the specified instance type belongs to. "
                    "(VcpuLimitExceeded)",
                }
            ]
        }


def test_a_class_refused_on_its_quota_is_left_out_and_named_as_a_quota(env: Env) -> None:  # noqa: F811
    env.register(slow_cpu_spec(40.0))
    assert env.ctl.run_epoch().counts.get("t4", 0) > 0
    env.ctl.groups._asg = QuotaRefusals(env.clients["autoscaling"])
    env.ctl.clock = lambda: time.time() - 1.0  # activities are "now"; the epoch must see them
    out = env.ctl.run_epoch()
    assert out.status == "published" and out.counts.get("t4", 0) == 0
    assert out.excluded_hardware["t4"].startswith("launch failed (quota: You have requested more vCPU")
