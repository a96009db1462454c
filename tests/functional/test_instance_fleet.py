"""The local fleet emulator against moto's Auto Scaling: groups per hardware class from the catalog,
agents started per instance, scale-in through the drain (SIGTERM, Terminating:Wait in the fake
IMDS, terminate once exited or at the hook timeout), Spot interruption and replacement, restarts."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest

from core.errors import ConfigError
from profiles.hardware import load_catalog
from skinflint.local.fleet import FleetEmulator, LocalImds, asg_name, create_groups
from workers.lifecycle import ImdsClient, LifecycleWatcher

pytestmark = pytest.mark.functional

_pids = itertools.count(1000)


@dataclass
class FakeAgent:
    """Stands in for an agent process: records signals; the test decides when it exits."""

    instance_id: str
    hardware: str
    imds_url: str
    pid: int = field(default_factory=lambda: next(_pids))
    code: int | None = None
    signals: list[str] = field(default_factory=list)

    def poll(self) -> int | None:
        return self.code

    def terminate(self) -> None:
        self.signals.append("TERM")

    def kill(self) -> None:
        self.signals.append("KILL")
        self.code = -9


class Clock:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def fleet():
    import boto3
    from moto import mock_aws

    with mock_aws():
        asg, ec2 = (
            boto3.client("autoscaling", region_name="us-east-1"),
            boto3.client("ec2", region_name="us-east-1"),
        )
        groups = create_groups(asg, ec2, load_catalog(), ["t4", "c6i.large"], hook_timeout_s=30)
        imds = LocalImds().start()
        agents: list[FakeAgent] = []
        idle: set[str] = set()

        def launch(iid: str, hw: str, url: str) -> FakeAgent:
            agents.append(FakeAgent(iid, hw, url))
            return agents[-1]

        clock = Clock()
        emu = FleetEmulator(
            asg, groups, launch, imds, is_idle=lambda i: i in idle, hook_timeout_s=30, clock=clock
        )
        yield asg, ec2, emu, agents, idle, clock
        imds.stop()


def group(asg, hw: str) -> dict:
    return asg.describe_auto_scaling_groups(AutoScalingGroupNames=[asg_name(hw)])["AutoScalingGroups"][0]


def live(agents: list[FakeAgent]) -> list[FakeAgent]:
    return [a for a in agents if a.code is None]


def test_groups_follow_the_catalog_and_cdk_names(fleet):
    asg, ec2, *_ = fleet
    g = group(asg, "c6i.large")
    assert g["AutoScalingGroupName"] == "skinflint-workers-c6i-large"
    assert (g["MinSize"], g["DesiredCapacity"]) == (0, 0)
    assert g["NewInstancesProtectedFromScaleIn"] is True
    hooks = asg.describe_lifecycle_hooks(AutoScalingGroupName=g["AutoScalingGroupName"])["LifecycleHooks"]
    assert [(h["LifecycleHookName"], h["LifecycleTransition"]) for h in hooks] == [
        ("skinflint-drain", "autoscaling:EC2_INSTANCE_TERMINATING")
    ]
    lt = ec2.describe_launch_template_versions(LaunchTemplateName="skinflint-t4")["LaunchTemplateVersions"][0]
    assert lt["LaunchTemplateData"]["InstanceType"] == "g4dn.xlarge"


def test_unknown_or_untyped_hardware_is_refused(fleet):
    asg, ec2, *_ = fleet
    with pytest.raises(ConfigError, match="unknown hardware class a100"):
        create_groups(asg, ec2, load_catalog(), ["a100"])
    with pytest.raises(ConfigError, match="p100 has no EC2 instance type"):
        create_groups(asg, ec2, load_catalog(), ["p100"])


def test_scale_out_starts_one_agent_per_instance_with_its_own_imds(fleet):
    asg, _, emu, agents, *_ = fleet
    asg.set_desired_capacity(AutoScalingGroupName=asg_name("t4"), DesiredCapacity=2)
    emu.reconcile()
    assert sorted(a.instance_id for a in agents) == sorted(
        i["InstanceId"] for i in group(asg, "t4")["Instances"]
    )
    assert {a.hardware for a in agents} == {"t4"}
    # each agent reads its own instance id from the fake IMDS (IMDSv2)
    for a in agents:
        assert ImdsClient(a.imds_url).instance_id() == a.instance_id
    emu.reconcile()
    assert len(agents) == 2  # idempotent


def test_scale_in_drains_the_idle_instance_first_then_terminates_it(fleet):
    asg, _, emu, agents, idle, clock = fleet
    asg.set_desired_capacity(AutoScalingGroupName=asg_name("t4"), DesiredCapacity=3)
    emu.reconcile()
    idle.add(agents[0].instance_id)  # the oldest, but it serves no slot
    asg.set_desired_capacity(AutoScalingGroupName=asg_name("t4"), DesiredCapacity=2)
    emu.reconcile()
    victim = agents[0]
    # moto did not terminate anything (instances are protected): the emulator drains first
    assert len(group(asg, "t4")["Instances"]) == 3
    assert victim.signals == ["TERM"] and all(not a.signals for a in agents[1:])
    notice = LifecycleWatcher(ImdsClient(victim.imds_url)).check()
    assert notice is not None and notice.reason == "scale-in"  # Terminating:Wait, as on AWS
    clock.t += 1.5
    emu.reconcile()  # still draining: nothing more happens
    assert len(group(asg, "t4")["Instances"]) == 3 and victim.signals == ["TERM"]
    victim.code = 0  # drained and exited
    emu.reconcile()
    g = group(asg, "t4")
    assert g["DesiredCapacity"] == 2
    assert sorted(i["InstanceId"] for i in g["Instances"]) == sorted(a.instance_id for a in agents[1:])
    assert [e.kind for e in emu.events if e.instance_id == victim.instance_id] == [
        "launched", "scale-in", "terminated",
    ]  # fmt: skip
    assert "drained in 1.50 s" in emu.events[-1].detail


def test_a_drain_past_the_hook_timeout_is_killed(fleet):
    asg, _, emu, agents, _, clock = fleet
    asg.set_desired_capacity(AutoScalingGroupName=asg_name("t4"), DesiredCapacity=1)
    emu.reconcile()
    asg.set_desired_capacity(AutoScalingGroupName=asg_name("t4"), DesiredCapacity=0)
    emu.reconcile()
    clock.t += 31  # the hook's heartbeat timeout (30 s) passes
    emu.reconcile()
    assert agents[0].signals == ["TERM", "KILL"]
    assert group(asg, "t4")["Instances"] == []


def test_spot_interruption_drains_and_the_group_replaces_the_instance(fleet):
    asg, _, emu, agents, _, clock = fleet
    asg.set_desired_capacity(AutoScalingGroupName=asg_name("t4"), DesiredCapacity=1)
    emu.reconcile()
    first = agents[0]
    emu.interrupt(first.instance_id)
    notice = LifecycleWatcher(ImdsClient(first.imds_url), clock=clock).check()
    assert notice is not None and notice.reason == "spot" and notice.window_s == pytest.approx(120, abs=2)
    first.code = 0  # the agent drained on the notice
    emu.reconcile()  # terminated; moto launches a replacement (desired unchanged)
    emu.reconcile()  # the replacement gets its agent
    g = group(asg, "t4")
    assert g["DesiredCapacity"] == 1 and len(g["Instances"]) == 1
    assert g["Instances"][0]["InstanceId"] != first.instance_id
    assert [a.instance_id for a in live(agents)] == [g["Instances"][0]["InstanceId"]]


def test_a_crashed_agent_is_restarted_then_given_up(fleet):
    asg, _, emu, agents, *_ = fleet
    emu.max_restarts = 1
    asg.set_desired_capacity(AutoScalingGroupName=asg_name("c6i.large"), DesiredCapacity=1)
    emu.reconcile()
    iid = agents[0].instance_id
    agents[0].code = 1
    emu.reconcile()
    assert [a.instance_id for a in agents] == [iid, iid]  # restarted on the same instance
    agents[1].code = 1
    emu.reconcile()  # second crash: the instance is replaced instead
    emu.reconcile()
    assert [e.kind for e in emu.events][:3] == ["launched", "restarted", "terminated"]
    assert len(live(agents)) == 1 and live(agents)[0].instance_id != iid
