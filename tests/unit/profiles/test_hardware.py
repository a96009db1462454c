"""Hardware catalog: prices, instance types, P100 refusal."""

import pytest

from planner.models import HardwareSpec
from profiles.errors import UnknownHardwareError, UnmappedHardwareError
from profiles.hardware import cpu_hardware, gpu_hardware, load_catalog, select, validate_for_deployment


def test_catalog_loads_as_hardware_specs():
    cat = load_catalog()
    assert set(cat) == {"p100", "v100", "t4", "c6i.large", "c6i.xlarge", "c6i.2xlarge"}
    assert all(isinstance(s, HardwareSpec) for s in cat.values())
    assert cat["v100"].instance_type == "p3.2xlarge"
    assert cat["t4"].instance_type == "g4dn.xlarge"
    assert cat["p100"].instance_type is None
    for name, spec in cat.items():
        extra = spec.model_extra or {}
        assert spec.price_per_hour > 0
        assert extra["vcpus"] > 0 and extra["price_date"], name
        if spec.instance_type:
            assert extra["region"] == "us-east-1"


def test_cpu_sizes_are_ordered_by_vcpus_and_priced_linearly():
    cat = load_catalog()
    assert cpu_hardware(cat) == ["c6i.large", "c6i.xlarge", "c6i.2xlarge"]
    assert set(gpu_hardware(cat)) == {"p100", "v100", "t4"}
    # 2, 4, 8 vCPUs at 0.085 USD/h per 2 vCPUs
    for name, vcpus in (("c6i.large", 2), ("c6i.xlarge", 4), ("c6i.2xlarge", 8)):
        assert (cat[name].model_extra or {})["vcpus"] == vcpus
        assert cat[name].price_per_hour == pytest.approx(0.085 * vcpus / 2)


def test_deployment_refuses_p100_with_a_clear_message():
    cat = load_catalog()
    with pytest.raises(UnmappedHardwareError, match="p100 has no EC2 instance type") as err:
        validate_for_deployment(cat, ["v100", "p100"])
    assert err.value.names == ("p100",)
    assert "\n" not in str(err.value)


def test_deployment_accepts_mapped_hardware():
    cat = load_catalog()
    ok = validate_for_deployment(cat, ["v100", "t4", "c6i.large"])
    assert {n: s.instance_type for n, s in ok.items()} == {
        "v100": "p3.2xlarge",
        "t4": "g4dn.xlarge",
        "c6i.large": "c6i.large",
    }
    mapped = validate_for_deployment(cat, ["p100"], instance_types={"p100": "onprem-p100"})
    assert mapped["p100"].instance_type == "onprem-p100"
    assert cat["p100"].instance_type is None  # the catalog itself is unchanged


def test_unknown_hardware_is_named():
    with pytest.raises(UnknownHardwareError, match="'a100'"):
        select(load_catalog(), ["a100"])
