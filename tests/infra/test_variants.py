"""Context variants that change the fleet: Spot with capacity rebalancing, P100 mapped by the user.
Synthesized with cdk-nag too: the mixed-instances groups meet different rules than the default app."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from cdk import constants as C
from tests.infra.conftest import CONTEXT, resources

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.infra


@pytest.fixture(scope="module")
def spot_fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from cdk.app import build_app

    outdir: Path = tmp_path_factory.mktemp("cdk.spot")
    ctx = {**CONTEXT, "hardware": "t4,p100", "p100_instance_type": "g4dn.2xlarge", "spot": "true"}
    build_app(ctx, outdir=str(outdir), nag=True).synth()
    return json.loads((outdir / f"{C.FLEET_STACK}.template.json").read_text())


def test_spot_groups_rebalance_and_use_spot_only(spot_fleet: dict[str, Any]) -> None:
    groups = resources(spot_fleet, "AWS::AutoScaling::AutoScalingGroup")
    assert len(groups) == 2
    for g in groups.values():
        p = g["Properties"]
        assert p["CapacityRebalance"] is True
        dist = p["MixedInstancesPolicy"]["InstancesDistribution"]
        assert dist["OnDemandPercentageAboveBaseCapacity"] == 0
        assert dist["SpotAllocationStrategy"] == "price-capacity-optimized"


def test_p100_group_launches_the_mapped_type(spot_fleet: dict[str, Any]) -> None:
    types = {
        g["Properties"]["AutoScalingGroupName"]: g["Properties"]["MixedInstancesPolicy"]["LaunchTemplate"][
            "Overrides"
        ][0]["InstanceType"]
        for g in resources(spot_fleet, "AWS::AutoScaling::AutoScalingGroup").values()
    }
    assert types == {"skinflint-workers-t4": "g4dn.xlarge", "skinflint-workers-p100": "g4dn.2xlarge"}
