"""The instance's wiring of the hook before a claim (workers/instance.py): which classes check their
provider, which measure, and with what provenance; the S3 store is a fake that holds nothing."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from workers.instance import _before_claim, _parser
from workers.runtimes import CPU_PROVIDER, CUDA_PROVIDER


class _EmptyS3:
    def get_object(self, **kw: Any) -> Any:
        raise ClientError({"Error": {"Code": "NoSuchKey", "Message": "none"}}, "GetObject")


class _Plans:
    def fleet(self, version: int) -> Any:
        return None

    def deployment(self, version: int, app: str) -> Any:
        return None


def _wire(*argv: str) -> Any:
    args = _parser().parse_args(["--hardware", *argv])
    return _before_claim(args, "i-1", plans=_Plans(), s3=_EmptyS3(), bucket="b", resolver=None)  # type: ignore[arg-type]


def test_a_gpu_class_checks_its_provider_and_measures_what_only_derived_entries_cover():
    _, hook = _wire("t4")
    assert hook is not None and hook.gpu and not hook.require_onsite and hook.store is not None
    assert hook.instance.instance_type == "g4dn.xlarge" and hook.instance.provider == CUDA_PROVIDER
    assert hook.instance_id == "i-1" and hook.budget_s == 120.0


def test_a_gpu_class_checks_its_provider_even_when_it_measures_nothing():
    _, hook = _wire("t4", "--onsite-profiles", "off")
    assert hook is not None and hook.gpu and hook.store is None


@pytest.mark.parametrize(
    ("flag", "hooked", "onsite"), [("derived", True, False), ("all", True, True), ("off", False, False)]
)
def test_a_cpu_class_measures_as_asked(flag: str, hooked: bool, onsite: bool):
    _, hook = _wire("c6i.large", "--onsite-profiles", flag, "--onsite-budget-s", "30")
    assert (hook is not None) == hooked
    if hook is not None:
        assert not hook.gpu and hook.require_onsite == onsite and hook.budget_s == 30.0
        assert hook.instance.provider == CPU_PROVIDER and hook.instance.device.startswith("cpu")
