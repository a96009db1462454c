"""The planning epoch on moto: register -> plan written -> Auto Scaling groups sized; the 10 s
guard, no-op epochs under steady load, a failing planner keeps the last good version and alarms,
hardware that cannot be had is planned around, the Lambda handler end to end."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import time
from dataclasses import dataclass
from typing import Any

import pytest

from control.epoch import ControlConfig, Controller
from control.errors import RegistrationError
from control.service import Registrar, build_controller
from core.adapters.metrics import MemoryMetrics
from core.settings import DataPlaneConfig
from skinflint.local.provision import create_base

ASGS = {"t4": "skinflint-workers-t4", "c6i.large": "skinflint-workers-c6i-large"}
SPEC: dict[str, Any] = {
    "name": "cams",
    "slo_s": 0.5,
    "rate": 20.0,
    "modules": {"det": {"model": "det-net"}, "cls": {"model": "cls-net"}},
    "edges": [["det", "cls", 2.0]],
    "hardware": ["t4", "c6i.large"],
    "profiles": {
        "det-net": [
            {"hardware": "t4", "batch": 1, "duration_s": 0.01},
            {"hardware": "t4", "batch": 4, "duration_s": 0.02},
            {"hardware": "c6i.large", "batch": 1, "duration_s": 0.05},
        ],
        "cls-net": [
            {"hardware": "t4", "batch": 4, "duration_s": 0.01},
            {"hardware": "c6i.large", "batch": 1, "duration_s": 0.02},
            {"hardware": "c6i.large", "batch": 2, "duration_s": 0.03},
        ],
    },
}


class Clock:
    def __init__(self) -> None:  # 30 s into a minute, so windows are easy to reason about
        self.t = math.floor(time.time() / 60) * 60 - 3600 + 30.0

    def __call__(self) -> float:
        return self.t


@dataclass
class Env:
    cfg: DataPlaneConfig
    clients: dict[str, Any]
    clock: Clock
    ctl: Controller
    metrics: MemoryMetrics
    registrar: Registrar

    def register(self, doc: dict[str, Any]) -> Any:
        return self.registrar.register(doc, now=self.clock())

    def frames(self, app: str, rate: float, shed: float = 0.0) -> None:
        """``rate`` frames/s accepted (and ``shed`` frames/s refused for lack of capacity) during
        the window the next epoch (60 s on) will read."""
        start = math.floor((self.clock.t + 60) / 60) * 60 - 60
        series = [("FramesAccepted", [{"Name": "App", "Value": app}], rate)]
        if shed:
            dims = [{"Name": "App", "Value": app}, {"Name": "Reason", "Value": "over_planned_rate"}]
            series.append(("FrontRejected", dims, shed))
        self.clients["cloudwatch"].put_metric_data(
            Namespace=self.cfg.metrics_namespace,
            MetricData=[
                {
                    "MetricName": name,
                    "Dimensions": dims,
                    "Timestamp": start + 5,
                    "StatisticValues": {"SampleCount": 1, "Sum": r * 60, "Minimum": 0, "Maximum": 1},
                }
                for name, dims, r in series
            ],
        )

    def desired(self) -> dict[str, int]:
        groups = self.clients["autoscaling"].describe_auto_scaling_groups()["AutoScalingGroups"]
        by_name = {v: k for k, v in ASGS.items()}
        return {by_name[g["AutoScalingGroupName"]]: g["DesiredCapacity"] for g in groups}


def make_groups(clients: dict[str, Any]) -> None:
    clients["ec2"].create_launch_template(
        LaunchTemplateName="workers",
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "t3.micro"},
    )
    for name in ASGS.values():
        clients["autoscaling"].create_auto_scaling_group(
            AutoScalingGroupName=name,
            LaunchTemplate={"LaunchTemplateName": "workers"},
            MinSize=0,
            MaxSize=10,
            DesiredCapacity=0,
            AvailabilityZones=["us-east-1a"],
        )


@pytest.fixture(scope="module")
def clients() -> Any:
    """boto3 clients made once (client creation is most of a moto test's setup); each test's
    ``mock_aws`` gives them a fresh, empty account (moto must be imported before they are made)."""
    import boto3
    import moto  # noqa: F401

    with pytest.MonkeyPatch.context() as mp:
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            mp.setenv(k, "testing")
        names = ("dynamodb", "s3", "sqs", "cloudwatch", "autoscaling", "ec2")
        # A fresh session: boto3's default one may predate moto's import (an earlier test made
        # clients in process), and moto only hooks sessions created after it is imported.
        session = boto3.session.Session()
        yield {n: session.client(n, region_name="us-east-1") for n in names}


@pytest.fixture
def env(clients: dict[str, Any]) -> Any:
    from moto import mock_aws

    with mock_aws():
        cfg = DataPlaneConfig()
        create_base(clients["dynamodb"], clients["s3"], cfg)
        make_groups(clients)
        clock = Clock()
        ctl = build_controller(cfg, ControlConfig(asg_names=ASGS), clients=clients, clock=clock)
        ctl.metrics = metrics = MemoryMetrics()
        registrar = Registrar(ctl.registry, ctl.states, ctl.catalog, lambda _m: None)
        yield Env(cfg, clients, clock, ctl, metrics, registrar)


def deployed_and_steady(env: Env) -> Any:
    """Register SPEC, publish it, and run one epoch at its registered rate (nothing changes): the
    published epoch's summary."""
    env.register(SPEC)
    first = env.ctl.run_epoch()
    assert first.status == "published"
    env.frames("cams", 20.0)
    env.clock.t += 60
    assert env.ctl.run_epoch().status == "unchanged"
    return first


def count_solves(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the problems the dispatch-aware solve is called for from now on (in order)."""
    import planner.robust

    solves: list[str] = []
    real = planner.robust.solve_dispatchable

    def counted(problem: Any, **kw: Any) -> Any:
        solves.append(problem.name)
        return real(problem, **kw)

    monkeypatch.setattr(planner.robust, "solve_dispatchable", counted)
    return solves


def serve_every_slot(env: Env, version: int, at: float | None = None, skip: int = 0) -> list[str]:
    """An instance claims each slot of ``version`` (but the last ``skip``) and heartbeats that it
    serves it (what the agent does once it has loaded the slot's models). Returns the slots served."""
    from core.adapters.plan_store import InstanceStatus

    fleet = env.ctl.plans.fleet(version)
    assert fleet is not None
    served = []
    for inst in fleet.instances[: len(fleet.instances) - skip]:
        iid = f"i-{version}-{inst.slot}".replace("/", "-").replace(".", "-")
        got = env.ctl.plans.claim(version, iid, inst.hardware)
        assert got is not None
        env.ctl.plans.put_instance(
            InstanceStatus(
                instance_id=iid,
                hardware=inst.hardware,
                version=version,
                slot=got.slot,
                at=env.clock() if at is None else at,
            )
        )
        served.append(str(got.slot))
    return served


def test_registered_app_is_planned_published_and_the_groups_sized(env: Env) -> None:
    # GIVEN the planner has run once (it records the worker groups registration checks against)
    assert env.ctl.run_epoch().status == "unchanged"
    env.register(SPEC)
    env.clock.t += 60
    # WHEN the next epoch runs
    out = env.ctl.run_epoch()
    # THEN a version is written, the app's modules got queues, and the groups match the fleet
    assert out.status == "published", out.as_json()
    cur = env.ctl.plans.current()
    assert cur is not None and cur.version == out.version and set(cur.apps) == {"cams"}
    assert cur.activate_at == pytest.approx(env.clock() + 15.0)
    dep = env.ctl.plans.deployment(cur.version, "cams")
    assert dep is not None and dep.roots == ["det"] and set(dep.queues) == {"det", "cls"}
    fleet = env.ctl.plans.fleet(cur.version)
    assert fleet is not None and sum(fleet.counts().values()) >= 2
    assert out.rates["cams"]["planned"] >= 20.0 * 1.1  # registered rate + headroom
    for urls in dep.queues.values():
        for url in urls.values():
            assert f"-v{cur.version}-" in url
            env.clients["sqs"].get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    assert env.desired() == {hw: fleet.counts().get(hw, 0) for hw in ASGS}
    assert out.desired == env.desired()
    assert env.metrics.total("PlanningFailures") == 0 and env.metrics.total("PlanVersionPublished") == 1
    # the plan is dispatch-aware: realised worst cases within the SLO, the spread rate for the data plane
    extra = dep.plan.model_extra or {}
    assert extra["dispatch_realised"] is True
    assert all(p["worst_case_latency_s"] <= SPEC["slo_s"] + 1e-9 for p in extra["paths"])
    cls = (dep.plan.modules["cls"].model_extra or {})["dispatch"]
    assert cls["burst"] == 2  # a det batch of one frame sends ceil(2.0) = 2 cls requests at once
    assert cls["required_rate"] - 1e-9 <= cls["spread_rate"] <= cls["capacity_rate"] + 1e-9


def test_an_admission_reserve_plans_for_less_than_the_slo_frames_keep(env: Env) -> None:
    # GIVEN an app registered with 20 % of its SLO left for frames admitted into a later window
    env.register(SPEC | {"admission_reserve": 0.2})
    out = env.ctl.run_epoch()
    assert out.status == "published", out.as_json()
    cur = env.ctl.plans.current()
    assert cur is not None
    dep = env.ctl.plans.deployment(cur.version, "cams")
    assert dep is not None
    # THEN its plan's paths fit 80 % of the SLO, while frames keep the whole SLO as their deadline
    assert dep.slo_s == SPEC["slo_s"] and dep.planning_slo_s == pytest.approx(0.8 * SPEC["slo_s"])
    paths = (dep.plan.model_extra or {})["paths"]
    assert all(p["worst_case_latency_s"] <= 0.8 * SPEC["slo_s"] + 1e-9 for p in paths)
    # AND a re-registration without it publishes a version planned for the whole SLO
    env.register(SPEC)
    env.frames("cams", 20.0)
    env.clock.t += 60
    assert env.ctl.run_epoch().status == "published"
    cur = env.ctl.plans.current()
    assert cur is not None
    dep = env.ctl.plans.deployment(cur.version, "cams")
    assert dep is not None and dep.planning_slo_s is None


def test_a_push_app_gets_its_results_queue_kept_across_versions(env: Env) -> None:
    # GIVEN an app registered with its results pushed
    env.register(SPEC | {"results": "push"})
    assert env.ctl.run_epoch().status == "published"
    cur = env.ctl.plans.current()
    assert cur is not None
    dep = env.ctl.plans.deployment(cur.version, "cams")
    # THEN its deployment names its results queue, encrypted, redriven to the DLQ, kept 7 days
    assert dep is not None and dep.results == "push"
    assert dep.results_queue is not None and dep.results_queue.endswith("/skinflint-cams-results")
    attrs = env.clients["sqs"].get_queue_attributes(QueueUrl=dep.results_queue, AttributeNames=["All"])
    attrs = attrs["Attributes"]
    assert attrs["SqsManagedSseEnabled"] == "true" and "deadLetterTargetArn" in attrs["RedrivePolicy"]
    assert attrs["MessageRetentionPeriod"] == str(7 * 86_400)
    assert env.ctl._push_queues == {"cams": dep.results_queue}
    # AND a later version (the load tripled) keeps it
    env.frames("cams", 20.0)
    env.clock.t += 60
    assert env.ctl.run_epoch().status == "unchanged"
    env.frames("cams", 25.0, shed=35.0)
    env.clock.t += 60
    assert env.ctl.run_epoch().status == "published"
    later = env.ctl.plans.current()
    assert later is not None and later.version > cur.version
    again = env.ctl.plans.deployment(later.version, "cams")
    assert again is not None and again.results_queue == dep.results_queue
    # AND a bad value is refused at registration, in one line
    with pytest.raises(RegistrationError, match="results must be one of pull, push, got 'kafka'"):
        env.register(SPEC | {"results": "kafka"})


def test_a_shed_target_reserve_is_chosen_again_when_the_rate_moves(env: Env) -> None:
    # GIVEN an app whose registration chose the reserve for a 1 % shed target at 20 frames/s (0.2: the
    # hop is latency only, so the plans hold no device time for it and 0.15 sheds more than 1 %)
    env.register(SPEC | {"slo_s": 0.25, "shed_target": 0.01})
    record = env.ctl.registry.record("cams")
    assert record is not None and record.admission_reserve == 0.2
    assert env.ctl.run_epoch().status == "published"
    env.frames("cams", 20.0)  # the window of the first frames is not a rate yet
    env.clock.t += 60
    assert env.ctl.run_epoch().status == "unchanged"
    # WHEN the app runs at twice its registered rate (that reserve sheds more than 1 % there)
    env.frames("cams", 40.0)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    # THEN the epoch chooses the reserve again at the rate it planned for, and keeps it
    assert "cams" in out.reserves, json.dumps(out.as_json())
    review = out.reserves["cams"]
    assert review["previous_reserve"] == 0.2 and review["reserve"] > 0.2 and review["met"] is True
    assert review["rate"] == pytest.approx(out.rates["cams"]["planned"] / 1.1, rel=1e-3)
    assert review["simulated_shed"] <= 0.01 and "reserve_review" in out.timings_ms
    choice = env.ctl.states.load().reserves["cams"]
    assert choice.reserve == review["reserve"] and choice.revision == record.revision
    assert env.metrics.total("ShedTargetUnmet") == 0
    # AND the next epoch plans for the SLO less that reserve, without reviewing it again
    env.frames("cams", 40.0)
    env.clock.t += 60
    nxt = env.ctl.run_epoch()
    assert nxt.status == "published" and "cams" in nxt.changed and not nxt.reserves
    cur = env.ctl.plans.current()
    assert cur is not None
    dep = env.ctl.plans.deployment(cur.version, "cams")
    assert dep is not None and dep.slo_s == 0.25
    assert dep.planning_slo_s == pytest.approx(0.25 * (1 - review["reserve"]))
    # AND a re-registration starts again from the reserve it chooses
    env.register(SPEC | {"slo_s": 0.25, "shed_target": 0.01, "min_rate": 1.0})
    env.frames("cams", 40.0)
    env.clock.t += 60
    env.ctl.run_epoch()
    state = env.ctl.states.load()
    assert "cams" not in state.reserves or state.reserves["cams"].revision == record.revision + 1


def test_a_shed_target_no_reserve_meets_at_the_new_rate_warns(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    from control.registration import reserve

    # GIVEN an app whose 1 % target is met at 20 frames/s (reserve 0.3)
    env.register(SPEC | {"slo_s": 0.3, "shed_target": 0.01})
    assert env.ctl.run_epoch().status == "published"
    env.frames("cams", 20.0)
    env.clock.t += 60
    env.ctl.run_epoch()
    # WHEN at three times that rate every reserve's plan sheds 5 % (the simulator, stood in)
    sheds = iter([0.05, 0.04, 0.05, 0.06, 0.05, 0.05, 0.05])
    monkeypatch.setattr(reserve, "simulated_shed", lambda *_a: next(sheds))
    env.frames("cams", 60.0)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    # THEN the reserve of least shed is kept, the epoch says so, and the metric counts the app
    review = out.reserves["cams"]
    assert review["met"] is False and review["simulated_shed"] == 0.04 and review["reserve"] == 0.05
    assert any("shed_target 0.01 is not met at" in w for w in out.warnings), out.warnings
    assert out.unmet_shed_targets == ["cams"] and env.metrics.total("ShedTargetUnmet", App="cams") == 1
    assert env.ctl.states.load().reserves["cams"].met is False
    # AND every later epoch says so too, while the choice stands (a level the alarm can watch)
    env.frames("cams", 60.0)
    env.clock.t += 60
    later = env.ctl.run_epoch()
    assert not later.reserves and later.unmet_shed_targets == ["cams"]
    assert env.metrics.values("ShedTargetUnmet", App="cams") == [1, 1]

    def broken(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("solver exploded")

    monkeypatch.setattr("planner.fleet.plan_fleet", broken)  # and an epoch that fails says so too
    env.frames("cams", 60.0)
    env.clock.t += 60
    failed = env.ctl.run_epoch()
    assert failed.status == "failed" and failed.unmet_shed_targets == ["cams"]


def test_reserve_reviews_can_be_turned_off(env: Env) -> None:
    from dataclasses import replace

    env.ctl.config = replace(env.ctl.config, reserve_review_s=0.0)
    env.register(SPEC | {"slo_s": 0.25, "shed_target": 0.01})
    env.ctl.run_epoch()
    for rate in (20.0, 40.0):
        env.frames("cams", rate)
        env.clock.t += 60
        out = env.ctl.run_epoch()
    assert out.rates["cams"]["observed"] == 40.0 and not out.reserves and not env.ctl.states.load().reserves


def test_the_ten_second_guard(env: Env) -> None:
    assert env.ctl.run_epoch().status == "unchanged"
    env.clock.t += 9.5
    out = env.ctl.run_epoch(reason="app changed")
    assert out.status == "skipped" and "minimum 10 s" in out.reason
    env.clock.t += 0.5
    assert env.ctl.run_epoch().status == "unchanged"


def test_steady_load_is_a_no_op_and_a_ramp_replans(env: Env) -> None:
    env.register(SPEC)
    first = env.ctl.run_epoch()
    assert first.status == "published"
    before = env.desired()
    for _ in range(3):  # observed at the registered rate: the same planned rate, nothing written
        env.frames("cams", 20.0)
        env.clock.t += 60
        out = env.ctl.run_epoch()
        assert out.status == "unchanged", out.as_json()
        assert out.version == first.version and not out.scaled
    assert env.ctl.plans.versions() == [first.version] and env.desired() == before
    env.frames("cams", 25.0, shed=35.0)  # three times the load; the front shed what it could not plan
    env.clock.t += 60
    ramp = env.ctl.run_epoch()
    assert ramp.status == "published" and ramp.previous == first.version
    assert ramp.rates["cams"]["observed"] == pytest.approx(60.0)
    assert sum(env.desired().values()) > sum(before.values())


def test_planner_failure_keeps_the_last_good_version_and_emits_the_metric(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.register(SPEC)
    good = env.ctl.run_epoch()
    assert good.status == "published"

    def broken(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("solver exploded")

    monkeypatch.setattr("planner.fleet.plan_fleet", broken)
    env.frames("cams", 60.0)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    assert out.status == "failed" and "solver exploded" in (out.error or "")
    assert env.ctl.plans.current().version == good.version  # type: ignore[union-attr]
    assert out.version == good.version and out.counts == good.counts
    assert env.metrics.values("PlanningFailures") == [0, 1]
    assert env.desired() == {hw: good.counts.get(hw, 0) for hw in ASGS}  # sized to the last good plan


def test_an_app_that_cannot_be_planned_keeps_its_plan_and_others_proceed(env: Env) -> None:
    env.register(SPEC)
    other = copy.deepcopy(SPEC) | {"name": "other"}
    env.register(other)
    good = env.ctl.run_epoch()
    assert good.status == "published" and set(good.changed) == {"cams", "other"}
    # "cams" now needs far more than an SLO this tight allows; "other" is fine
    env.ctl.registry.put(env.ctl.registry.get("cams")[1].model_copy(update={"slo_s": 0.012}))  # type: ignore[index]
    env.clock.t += 60
    out = env.ctl.run_epoch()
    assert "cams" in out.failed_apps
    cur = env.ctl.plans.current()
    assert cur is not None and set(cur.apps) == {"cams", "other"}
    kept = env.ctl.plans.deployment(cur.version, "cams")
    assert kept is not None and kept.slo_s == 0.5  # the plan in force, not the impossible one
    assert env.metrics.total("PlanningFailures", App="cams") >= 1


class FailingLaunches:
    """The Auto Scaling client, except that t4 launches fail for lack of capacity."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def describe_scaling_activities(self, **kw: Any) -> dict[str, Any]:
        import datetime as dt

        if kw["AutoScalingGroupName"] != ASGS["t4"]:
            return {"Activities": []}
        return {
            "Activities": [
                {
                    "StatusCode": "Failed",
                    "StartTime": dt.datetime.now(dt.UTC),
                    "StatusMessage": "We currently do not have sufficient g4dn.xlarge capacity "
                    "(InsufficientInstanceCapacity).",
                }
            ]
        }


def test_hardware_that_cannot_be_had_is_planned_around(env: Env) -> None:
    # at 40 frames/s (44 planned, 10 % headroom) with a slow CPU detector, one t4 detector is cheaper
    # than CPU ones: b1 at 0.2 s of device time is 5/s a c6i.large, so 9 x 0.085 = 0.765 $/h against
    # one t4 at 0.526 $/h (b4 at 0.02 s: 200/s); the hop is latency only, so it adds no machines
    spec = copy.deepcopy(SPEC) | {"rate": 40.0}
    spec["profiles"]["det-net"][2]["duration_s"] = 0.2
    env.register(spec)
    first = env.ctl.run_epoch()
    assert first.counts.get("t4", 0) > 0, first.counts
    env.ctl.groups._asg = FailingLaunches(env.clients["autoscaling"])
    env.ctl.clock = lambda: time.time() - 1.0  # activities are "now"; the epoch must see them
    out = env.ctl.run_epoch()
    assert out.status == "published" and "t4" in out.excluded_hardware
    assert out.counts.get("t4", 0) == 0 and out.counts["c6i.large"] > 0
    assert "InsufficientInstanceCapacity" in out.excluded_hardware["t4"]
    state = env.ctl.states.load()
    assert state.unavailable["t4"] > time.time()


def test_handler_end_to_end(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    import functions.planner as mod

    for k, v in {**env.cfg.to_env(), "SKINFLINT_ASG_NAMES": json.dumps(ASGS)}.items():
        monkeypatch.setenv(k, v)
    mod.reset()
    out = mod.handler({"source": "aws.events", "detail-type": "Scheduled Event"}, None)
    assert out["status"] == "unchanged"  # nothing registered yet
    env.register(SPEC)
    time.sleep(0.01)
    monkeypatch.setattr(mod._controller["c"], "clock", lambda: time.time() + 11.0)
    out = mod.handler({"source": "skinflint.apps", "detail": {"app": "cams"}}, None)
    assert out["status"] == "published" and out["reason"] == "app changed: cams", out
    assert out["version"] >= 1 and set(out["changed"]) == {"cams"}
    assert out["desired"] == env.desired() and sum(out["counts"].values()) > 0
    assert out["billed_per_hour"] >= out["occupancy_per_hour"] > 0
    assert {"solve", "pack", "publish", "total"} <= set(out["timings_ms"])
    json.dumps(out)  # the summary is JSON
    mod.reset()


def test_status_command_against_moto(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    from skinflint.cli import main
    from skinflint.commands.status import gap_text

    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] is None
    env.register(SPEC)
    out = env.ctl.run_epoch()
    # the minute the command reads: the last whole period that ended rate_lag_s ago (RateWindow); a
    # test within 10 s of that window moving waits for it to move, so the put and the read agree
    from control.epoch import ControlConfig
    from core.adapters.rates import RateWindow

    lag = ControlConfig().rate_lag_s
    if (time.time() - lag) % 60 > 50:
        time.sleep(60 - (time.time() - lag) % 60 + 0.1)
    end = RateWindow(time.time(), 60.0, 60, lag).end
    env.clients["cloudwatch"].put_metric_data(
        Namespace=env.cfg.metrics_namespace,
        MetricData=[
            {
                "MetricName": "FramesAccepted",
                "Dimensions": [{"Name": "App", "Value": "cams"}],
                "Timestamp": end - 30,
                "Value": 12 * 60.0,
            }
        ],
    )
    assert main(["status", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["version"] == out.version and doc["serving"] == out.version
    assert doc["apps"]["cams"] == {
        "planned": pytest.approx(out.rates["cams"]["planned"], abs=1e-3),
        "observed": 12.0,
        # each module's profile source on its planned class: this app's entries are derived (no
        # instance has measured them), so its first plan carries the derived margin
        "profile_sources": {"cls": {"c6i.large": "derived"}, "det": {"c6i.large": "derived"}},
        # the proven gap of the plan (#29): its cost against the plain optimum, a bound on any realisable plan
        "proven_gap": pytest.approx(out.proven_gaps["cams"], abs=1e-6),
    }
    assert out.proven_gaps["cams"] is not None and 0 <= out.proven_gaps["cams"] < 1
    assert {hw: h["planned"] for hw, h in doc["hardware"].items()} == {
        hw: out.counts.get(hw, 0) for hw in ASGS
    }
    assert {hw: h["desired"] for hw, h in doc["hardware"].items()} == env.desired()
    assert doc["billed_per_hour"] == pytest.approx(out.billed_per_hour, abs=1e-3)
    assert doc["last_epoch"]["status"] == "published"
    assert main(["status"]) == 0
    text = capsys.readouterr().out
    assert f"plan version {out.version}" in text and "billed $" in text and "cams" in text
    assert "gap" in text and gap_text(out.proven_gaps["cams"]) in text
    # a reserve the control loop chose again is shown beside the app's rates
    from control.state import ReserveChoice

    state = env.ctl.states.load()
    state.reserves["cams"] = ReserveChoice(reserve=0.4, rate=60.0, shed=0.054, met=False, revision=1, at=0.0)
    env.ctl.states.save(state, state.epoch)
    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["apps"]["cams"]["reserve"] == {
        "reserve": 0.4,
        "rate": 60.0,
        "shed": 0.054,
        "met": False,
    }
    assert main(["status"]) == 0
    assert "0.4 at 60/s, sheds 5.40% (shed_target unmet)" in capsys.readouterr().out


def test_fleet_events_release_the_leaving_instance_claims(env: Env) -> None:
    from control.service import handle_event
    from core.adapters.plan_store import InstanceStatus

    env.register(SPEC)
    v = env.ctl.run_epoch().version
    assert v is not None
    hw = next(h for h, n in env.ctl.plans.current().counts.items() if n)  # type: ignore[union-attr]
    inst = env.ctl.plans.claim(v, "i-0abc", hw)
    assert inst is not None
    env.ctl.plans.put_instance(
        InstanceStatus(instance_id="i-0abc", hardware=hw, version=v, slot=inst.slot, at=env.clock())
    )
    notice = {
        "LifecycleHookName": "skinflint-drain",
        "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
        "AutoScalingGroupName": ASGS[hw],
        "EC2InstanceId": "i-0abc",
        "LifecycleActionToken": "t",
    }
    records = [
        {"messageId": "1", "body": json.dumps({"Event": "autoscaling:TEST_NOTIFICATION"})},
        {"messageId": "2", "body": json.dumps(notice)},
        {"messageId": "3", "body": "not json"},
    ]
    out = handle_event(env.ctl, {"Records": records})
    assert out["batchItemFailures"] == [{"itemIdentifier": "3"}]
    assert out["released"] == {"i-0abc": [f"v{v}:{inst.slot}"]}
    assert env.ctl.plans.claims(v) == {}
    assert env.ctl.plans.instances()["i-0abc"].state == "draining"


def test_gc_keeps_versions_workers_serve_and_deletes_drained_ones(env: Env) -> None:
    from core.adapters.plan_store import InstanceStatus

    env.register(SPEC)
    v1 = env.ctl.run_epoch().version
    assert v1 is not None
    old_queues = {u for qs in env.ctl.plans.deployment(v1, "cams").queues.values() for u in qs.values()}  # type: ignore[union-attr]
    # a worker still serves v1, and one of its queues holds a message
    env.ctl.plans.put_instance(
        InstanceStatus(instance_id="i-1", hardware="t4", version=v1, at=env.clock() + 120)
    )
    busy = sorted(old_queues)[0]
    env.clients["sqs"].send_message(QueueUrl=busy, MessageBody="{}")
    for _ in range(2):  # the app is observed from its first whole window on
        env.frames("cams", 60.0)
        env.clock.t += 60
        v2 = env.ctl.run_epoch().version
    assert v2 != v1
    # the workers move to v2 (every slot served), so it activates at the lead, not its deadline;
    # two steady epochs later v2 has been active for long
    env.ctl.plans.put_instance(
        InstanceStatus(instance_id="i-1", hardware="t4", version=v2, at=env.clock() + 120)
    )
    serve_every_slot(env, v2, at=env.clock() + 120)
    assert env.ctl.check_activation().status == "ready"
    for _ in range(2):
        env.frames("cams", 60.0)
        env.clock.t += 60
        out = env.ctl.run_epoch()
        assert out.status == "unchanged"
    new_queues = {
        u for d in env.ctl.plans.deployments(v2).values() for qs in d.queues.values() for u in qs.values()
    }
    only_old = old_queues - new_queues
    if busy in only_old:  # the busy queue is v1's alone: v1 waits for it to drain
        assert out.gc["deleted_versions"] == [] and v1 in env.ctl.plans.versions()
        env.clients["sqs"].purge_queue(QueueUrl=busy)
        env.frames("cams", 60.0)
        env.clock.t += 60
        out = env.ctl.run_epoch()
    assert v1 not in env.ctl.plans.versions() and out.gc["deleted_versions"] == [v1]
    alive = set(env.clients["sqs"].list_queues().get("QueueUrls", []))
    assert not (only_old & alive) and new_queues <= alive


def test_service_overruns_are_learned_into_the_next_plan(env: Env) -> None:
    """The workers report batches finishing 40 ms later than planned on one module: the next epoch
    adds a 40 ms correction to that module's profile on that hardware and re-plans with it."""
    from dataclasses import replace

    env.ctl.config = replace(env.ctl.config, calibrate=True)  # opt-in (SKINFLINT_CALIBRATE=1)
    env.register(SPEC)
    first = env.ctl.run_epoch()
    assert first.status == "published" and not first.corrections
    dep = env.ctl.plans.deployment(first.version, "cams")
    assert dep is not None
    hw = dep.plan.modules["det"].groups[0].hardware
    before = dep.plan.modules["det"].groups[0].duration_s
    start = math.floor((env.clock.t + 60) / 60) * 60 - 60
    dims = [
        {"Name": "App", "Value": "cams"},
        {"Name": "Hardware", "Value": hw},
        {"Name": "Module", "Value": "det"},
    ]
    env.clients["cloudwatch"].put_metric_data(
        Namespace=env.cfg.metrics_namespace,
        MetricData=[
            {
                "MetricName": "ServiceOverrunMs",
                "Dimensions": dims,
                "Timestamp": start + 5,
                "StatisticValues": {"SampleCount": 30, "Sum": -300.0, "Minimum": -20.0, "Maximum": 38.0},
                "Unit": "Milliseconds",
            }
        ],
    )
    env.frames("cams", 20.0)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    assert out.corrections == {"cams": {f"det@{hw}": pytest.approx(0.04)}}, out.as_json()
    assert out.status == "published"
    after = env.ctl.plans.deployment(out.version, "cams")
    assert after is not None
    det = [g for g in after.plan.modules["det"].groups if g.hardware == hw]
    assert det and det[0].batch == dep.plan.modules["det"].groups[0].batch
    assert det[0].duration_s == pytest.approx(before + 0.04, abs=1e-6)
    # the module plan says what its durations include, so an emulating worker sleeps the profile's
    from workers.shares import assignment_for

    assert (after.plan.modules["det"].model_extra or {})["service_correction_s"] == {hw: 0.04}
    share = next(s for i in env.ctl.plans.fleet(out.version).instances for s in i.shares if s.module == "det")
    a = assignment_for(share, after, "i-1", lambda _d, _s: ("emulated", "det-net", None, 1))
    # the plan carries the hop apart (each group's overhead_s, issue #24), so its durations hold none:
    # model_s = duration - correction = (profile + 0.04) - 0.04, the profile's device time
    assert all(g.overhead_s == pytest.approx(after.overhead_s) for g in after.plan.modules["det"].groups)
    assert a.model_s == pytest.approx(share.duration_s - 0.04)
    assert a.duration_s == pytest.approx(share.duration_s)
    # the correction is state: a quiet window keeps it (the plan in force already carries it)
    env.frames("cams", 20.0)
    env.clock.t += 60
    again = env.ctl.run_epoch()
    assert again.status == "unchanged" and again.corrections == out.corrections


def test_machine_caps_keep_a_class_within_what_it_can_run(env: Env) -> None:
    """The local stack's real CPU runs at most one machine: a plan that would put more on it moves
    the module with the most machines there to another class, and re-planning keeps to it."""
    from dataclasses import replace

    from control.problems import machine_count

    doc = copy.deepcopy(SPEC)
    doc["hardware"] = ["c6i.large", "t4"]
    doc["rate"] = 60.0  # more than one c6i.large machine's worth of det or cls
    env.register(doc)
    uncapped = env.ctl.run_epoch()
    assert uncapped.status == "published"
    plan = env.ctl.plans.deployment(uncapped.version, "cams").plan
    assert sum(machine_count(plan, "c6i.large").values()) > 1  # the premise
    env.ctl.config = replace(env.ctl.config, machine_caps={"c6i.large": 1})
    env.register({**doc, "slo_s": 0.51})  # a new problem: solved again, now within the cap
    env.clock.t += 60
    out = env.ctl.run_epoch()
    assert out.status == "published", out.as_json()
    plan = env.ctl.plans.deployment(out.version, "cams").plan
    assert sum(machine_count(plan, "c6i.large").values()) <= 1
    for p in (plan.model_extra or {})["paths"]:
        assert p["worst_case_latency_s"] <= 0.51 + 1e-9


def test_a_window_the_first_frames_arrive_in_part_way_is_not_a_rate(env: Env) -> None:
    """An app that starts sending after the window began: the window's rate under-counts it; the
    registered rate holds until a whole window is observed (no re-plan down, then up again)."""
    env.register(SPEC)
    first = env.ctl.run_epoch()
    assert first.status == "published"
    env.clock.t += 120  # the next epoch reads two whole minutes; frames only in the second
    start = math.floor(env.clock.t / 60) * 60 - 60
    env.clients["cloudwatch"].put_metric_data(
        Namespace=env.cfg.metrics_namespace,
        MetricData=[
            {
                "MetricName": "FramesAccepted",
                "Dimensions": [{"Name": "App", "Value": "cams"}],
                "Timestamp": start + 5,
                "StatisticValues": {"SampleCount": 1, "Sum": 20.0 * 60, "Minimum": 0, "Maximum": 1},
            }
        ],
    )
    out = env.ctl.run_epoch()
    assert out.status == "unchanged", out.as_json()
    assert out.rates["cams"]["observed"] == pytest.approx(10.0)
    assert out.rates["cams"]["first_frames_after_s"] == pytest.approx(60.0)
    assert out.rates["cams"]["planned"] == first.rates["cams"]["planned"]
    env.frames("cams", 20.0)  # a whole window at the registered rate: observed from now on
    env.clock.t += 60
    steady = env.ctl.run_epoch()
    assert steady.status == "unchanged" and "first_frames_after_s" not in steady.rates["cams"]
    assert steady.rates["cams"]["observed"] == pytest.approx(20.0)


def test_the_first_epoch_takes_the_plan_the_registration_solved(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registration solves the app as the first epoch will and stores that plan with the revision; the
    epoch takes it instead of solving again (the same problem: same rate, hardware, policy)."""
    from planner.fleet import SOLVED_KEY

    assert env.ctl.run_epoch().status == "unchanged"  # the worker groups registration checks against
    record = env.register(SPEC)
    seed = env.ctl.registry.seed(record)
    assert record.seed_key is not None and seed is not None
    solves = count_solves(monkeypatch)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    assert out.status == "published", out.as_json()
    assert out.seeded == ["cams"] and solves == [] and "seeds" in out.timings_ms
    dep = env.ctl.plans.deployment(out.version, "cams")
    assert dep is not None
    solved = (dep.plan.model_extra or {})[SOLVED_KEY]  # the solver's modules the plan was shaped from
    assert solved == {m: mp.model_dump() for m, mp in seed.modules.items()}


def test_a_registration_plan_for_another_problem_or_unreadable_is_solved_again(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A seed checked at another headroom (another rate) does not match the epoch's problem, and one
    whose file is gone is left out with a warning: either way the app is solved and published."""
    from dataclasses import replace

    assert env.ctl.run_epoch().status == "unchanged"
    other = replace(env.registrar, headroom=0.5)  # the epoch plans with ControlConfig's 0.1
    other.register(SPEC, now=env.clock())
    solves = count_solves(monkeypatch)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    assert out.status == "published" and out.seeded == [] and solves == ["cams"], out.as_json()
    env.ctl.registry.delete("cams")
    env.clock.t += 60
    assert env.ctl.run_epoch().removed == ["cams"]
    record = env.register({**SPEC, "name": "cams2"})
    assert record.seed_key is not None
    env.clients["s3"].delete_object(Bucket=env.cfg.bucket, Key=record.seed_key)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    assert out.status == "published" and out.seeded == [], out.as_json()
    assert solves.count("cams2") == 2  # its registration and the epoch both solved it
    assert any("cams2: registration plan not used" in w for w in out.warnings)


def test_a_new_price_list_carries_the_plan_and_a_later_epoch_solves_it(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A price change makes every problem new but leaves the plans valid: with no solve budget left the
    epoch keeps the app's plan at the new prices (carried, nothing solved); the next epoch with budget
    solves it again and publishes the fresh plan."""
    from dataclasses import replace

    from planner.fleet import CARRIED_KEY

    first = deployed_and_steady(env)
    solves = count_solves(monkeypatch)
    env.ctl.catalog = {
        h: s.model_copy(update={"price_per_hour": s.price_per_hour * (0.5 if h == "t4" else 1.0)})
        for h, s in env.ctl.catalog.items()
    }
    budget = env.ctl.config.solve_budget_s
    env.ctl.config = replace(env.ctl.config, solve_budget_s=0.0)
    env.frames("cams", 20.0)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    assert out.carried == ["cams"] and out.resolved == [] and solves == [], out.as_json()
    assert env.metrics.total("CarriedApps") == 1  # on the dashboard
    dep = env.ctl.plans.deployment(out.version, "cams")
    assert dep is not None and CARRIED_KEY in (dep.plan.model_extra or {})
    t4 = sum(g.machines for mp in dep.plan.modules.values() for g in mp.groups if g.hardware == "t4")
    old = env.ctl.plans.deployment(first.version, "cams")
    assert old is not None
    assert dep.plan.billed_per_hour == pytest.approx(
        old.plan.billed_per_hour - t4 * env.ctl.catalog["t4"].price_per_hour
    )
    from skinflint.cli import main

    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["last_epoch"]["carried"] == ["cams"]
    assert main(["status"]) == 0
    assert "on a carried plan: cams" in " ".join(capsys.readouterr().out.split())
    env.ctl.config = replace(env.ctl.config, solve_budget_s=budget)
    env.frames("cams", 20.0)
    env.clock.t += 60
    again = env.ctl.run_epoch()
    assert again.resolved == ["cams"] and again.carried == [] and solves == ["cams"], again.as_json()
    cur = env.ctl.plans.current()
    assert cur is not None
    dep = env.ctl.plans.deployment(cur.version, "cams")
    assert dep is not None and CARRIED_KEY not in (dep.plan.model_extra or {})
    assert again.changed == {"cams": ["carried"]}  # the same machines: written for the mark
    env.frames("cams", 20.0)
    env.clock.t += 60
    last = env.ctl.run_epoch()  # nothing left to solve
    assert last.status == "unchanged" and last.resolved == [] and solves == ["cams"], last.as_json()


def test_a_re_registration_seeds_the_epoch_of_a_deployed_app(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new revision (here: a slower profile) asks for planning; its registration solved it, and the
    epoch takes that plan although the app has a deployment (the solver's plan for the new problem comes
    before re-timing the old one)."""
    deployed_and_steady(env)
    slower = copy.deepcopy(SPEC)
    for entry in slower["profiles"]["cls-net"]:
        entry["duration_s"] *= 1.2
    env.register(slower)
    solves = count_solves(monkeypatch)
    env.frames("cams", 20.0)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    assert out.status == "published" and out.seeded == ["cams"] and solves == [], out.as_json()
    assert out.carried == []  # the seed, not the old plan re-timed to the new durations


def test_new_apps_past_the_budget_get_quick_plans_and_a_later_epoch_solves_them(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two apps without a registration plan (stored without one) and no solve budget: the first is
    solved in full, the other gets the solve's quick plan (valid, published, carried); the next epoch
    with budget solves it in full."""
    from dataclasses import replace

    from planner.fleet import CARRIED_KEY
    from skinflint.commands.status import gap_text

    assert env.ctl.run_epoch().status == "unchanged"
    for name in ("cams", "cams2"):
        record = env.register({**SPEC, "name": name})
        assert record.seed_key is not None
        env.clients["s3"].delete_object(Bucket=env.cfg.bucket, Key=record.seed_key)
    budget = env.ctl.config.solve_budget_s
    env.ctl.config = replace(env.ctl.config, solve_budget_s=0.0)
    solves = count_solves(monkeypatch)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    assert out.status == "published" and out.quick == ["cams2"] and out.carried == ["cams2"], out.as_json()
    assert solves == ["cams", "cams2"]
    dep = env.ctl.plans.deployment(out.version, "cams2")
    assert dep is not None and (dep.plan.model_extra or {})[CARRIED_KEY]["quick"] is True
    from skinflint.cli import main

    # the quick plan carries its proven gap (against the plain problem's bound), and status shows it
    gap = out.proven_gaps["cams2"]
    assert gap is not None and 0 <= gap < 1
    assert main(["status"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "1 of them on a quick plan" in text and gap_text(gap) in text
    assert main(["status", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["apps"]["cams2"]["proven_gap"]
    assert shown == pytest.approx(gap, abs=1e-6)
    env.ctl.config = replace(env.ctl.config, solve_budget_s=budget)
    for name in ("cams", "cams2"):
        env.frames(name, 20.0)
    env.clock.t += 60
    again = env.ctl.run_epoch()
    assert again.resolved == ["cams2"] and again.carried == [] and again.quick == [], again.as_json()
    assert solves == ["cams", "cams2", "cams2"]
    cur = env.ctl.plans.current()
    assert cur is not None
    dep = env.ctl.plans.deployment(cur.version, "cams2")
    assert dep is not None and CARRIED_KEY not in (dep.plan.model_extra or {})


def test_a_registration_plan_on_hardware_without_a_worker_group_is_solved_again(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registered before the first epoch, the app is checked against the whole catalog, and its plan
    puts the detector on a V100 (one V100 for what seven T4 would do). The fleet has no V100 group: the
    epoch neither takes nor carries that plan; it solves the app on the groups there are."""
    spec = copy.deepcopy(SPEC)
    spec["hardware"] = ["t4", "c6i.large", "v100"]
    spec["profiles"]["det-net"] = [
        {"hardware": "t4", "batch": 1, "duration_s": 0.3},
        {"hardware": "v100", "batch": 4, "duration_s": 0.01},
    ]
    record = env.register(spec)  # before any epoch: no worker groups known yet
    seed = env.ctl.registry.seed(record)
    assert seed is not None
    assert {g.hardware for g in seed.modules["det"].groups} == {"v100"}
    solves = count_solves(monkeypatch)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    assert out.status == "published" and out.seeded == [] and out.carried == [], out.as_json()
    assert solves == ["cams"]
    dep = env.ctl.plans.deployment(out.version, "cams")
    assert dep is not None
    used = {g.hardware for mp in dep.plan.modules.values() for g in mp.groups}
    assert used <= set(ASGS) and "t4" in used


@pytest.mark.parametrize("batch", [0.0, 0.02])
def test_measured_hops_are_planned_per_module_and_reported(env: Env, batch: float) -> None:
    """The workers' first deliveries to det have a p99 of 120 ms (core/hops.py's histogram): the next
    epoch plans det with a 0.12 s hop instead of the 0.05 s cold-start default (its worst case grows by
    the 0.07 s), the other modules keep the default, and the summary says which hop each module has.
    The worker's own time per batch (``batch_overhead_s``, e.g. its grace) is planned on top of either
    hop: a measured delivery does not replace it."""
    env.ctl.config = dataclasses.replace(env.ctl.config, batch_overhead_s=batch)
    env.registrar.overhead_s = 0.05 + batch  # the registration plans as the epoch does
    env.register(SPEC)
    first = env.ctl.run_epoch()
    assert first.status == "published"
    # the cold start: every module on the default, nothing measured
    assert {m: h["source"] for m, h in first.hops["cams"].items()} == dict.fromkeys(
        SPEC["modules"], "default"
    )
    assert all(h["hop_s"] == 0.05 for h in first.hops["cams"].values())
    dep = env.ctl.plans.deployment(first.version, "cams")
    assert dep is not None
    before = dep.plan.modules["det"]
    assert all(g.overhead_s == pytest.approx(0.05 + batch) for g in before.groups)
    start = math.floor((env.clock.t + 60) / 60) * 60 - 60

    def bucket(upto: str, count: float) -> dict[str, Any]:
        dims = [
            {"Name": "App", "Value": "cams"},
            {"Name": "Module", "Value": "det"},
            {"Name": "UpToMs", "Value": upto},
        ]
        return {"MetricName": "HopDelayBucket", "Dimensions": dims, "Timestamp": start + 5, "Unit": "Count",
                "StatisticValues": {"SampleCount": count, "Sum": count, "Minimum": 1.0, "Maximum": 1.0}}  # fmt: skip

    # 1,200 deliveries: 1,180 up to 30 ms, 20 up to 120 ms; the p99's rank is ceil(0.99 * 1200) = 1188 >
    # 1180, so the p99 is 120 ms: max(0.12, floor 0.02) = 0.12 s, above the 0.05 in force: det moves
    env.clients["cloudwatch"].put_metric_data(
        Namespace=env.cfg.metrics_namespace, MetricData=[bucket("30", 1180.0), bucket("120", 20.0)]
    )
    env.frames("cams", 20.0)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    assert out.status == "published", out.as_json()
    det = out.hops["cams"]["det"]
    assert det == {"hop_s": pytest.approx(0.12), "source": "measured", "samples": 1200, "p99_s": 0.12}
    assert all(h["source"] == "default" for m, h in out.hops["cams"].items() if m != "det")
    assert out.as_json()["hops"]["cams"]["det"]["hop_s"] == pytest.approx(0.12)  # in the summary's JSON
    after = env.ctl.plans.deployment(out.version, "cams")
    assert after is not None
    assert all(g.overhead_s == pytest.approx(0.12 + batch) for g in after.plan.modules["det"].groups)
    assert all(
        g.overhead_s == pytest.approx(0.05 + batch)
        for m, mp in after.plan.modules.items()
        if m != "det"
        for g in mp.groups
    )
    # the planned worst case carries the measured hop: det's grows (0.12 - 0.05 = 0.07 s more hop;
    # its batches and windows may be re-chosen too, so at least the hop's share of it)
    assert after.plan.modules["det"].worst_case_latency_s > before.worst_case_latency_s
    for path in (after.plan.model_extra or {})["paths"]:
        assert path["worst_case_latency_s"] <= SPEC["slo_s"] + 1e-9
    # a quiet window (no deliveries read) keeps the measured hop: no re-plan
    env.frames("cams", 20.0)
    env.clock.t += 60
    again = env.ctl.run_epoch()
    assert again.status == "unchanged", again.as_json()
    assert again.hops["cams"]["det"] == {"hop_s": pytest.approx(0.12), "source": "kept", "samples": 0}
