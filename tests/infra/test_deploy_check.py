"""``skinflint deploy check`` against moto (STS, CloudFormation, SSM) with fakes where moto serves no
call (Service Quotas; the Deep Learning AMI's public parameter, which moto does not hold and refuses
to create under /aws/): every check reported, exit 0 on a good configuration, exit 1 naming the
blocker on a bad one."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from cdk import constants as C
from skinflint.cli import main
from skinflint.commands import deploy
from tests.infra.test_limits import fake_wheelhouse

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = [pytest.mark.infra, pytest.mark.functional]

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's account
GPU_AMI = "ami-0123456789abcdef0"


class FakeQuotas:
    """Service Quotas (moto serves none of its quotas): applied values, else AWS's defaults."""

    def __init__(self, applied: dict[str, float]):
        self.applied = applied

    def get_service_quota(self, ServiceCode: str, QuotaCode: str) -> dict[str, Any]:  # noqa: N803
        if QuotaCode not in self.applied:
            err = {"Error": {"Code": "NoSuchResourceException", "Message": "no applied quota"}}
            raise ClientError(err, "GetServiceQuota")
        return {"Quota": {"Value": self.applied[QuotaCode]}}

    def get_aws_default_service_quota(self, ServiceCode: str, QuotaCode: str) -> dict[str, Any]:  # noqa: N803
        return {"Quota": {"Value": 0.0 if QuotaCode in ("L-DB2E81BA", "L-417A185B") else 5.0}}


class SsmWithPublicGpuAmi:
    """moto's SSM, plus the GPU AMI's public parameter."""

    def __init__(self, ssm: Any, gpu: bool = True):
        self.ssm, self.gpu = ssm, gpu

    def get_parameter(self, Name: str) -> dict[str, Any]:  # noqa: N803
        if self.gpu and Name == C.GPU_AMI_PARAMETER:
            return {"Parameter": {"Name": Name, "Value": GPU_AMI}}
        return dict(self.ssm.get_parameter(Name=Name))


@pytest.fixture(autouse=True)
def _aws(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[None]:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(key, value)
    if "moto_server" in request.fixturenames:  # a real server: no in-process mock
        yield
        return
    with mock_aws():
        yield


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """GIVEN a bootstrapped account (CDKToolkit stack, version parameter), quotas for a few
    instances, built wheelhouses, Lambda layer and models."""
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=deploy.BOOTSTRAP_STACK,
        TemplateBody=json.dumps({"Resources": {"Q": {"Type": "AWS::SQS::Queue"}}}),
    )
    boto3.client("ssm", region_name=REGION).put_parameter(
        Name=deploy.BOOTSTRAP_VERSION_PARAMETER, Value="28", Type="String"
    )
    layer = tmp_path / "lambda-deps"
    (layer / "python").mkdir(parents=True)
    monkeypatch.setattr(C, "LAMBDA_DEPS_DIR", layer)
    models = tmp_path / "models"
    models.mkdir()
    (models / "ssdlite_mnv2.onnx").write_bytes(b"onnx")
    state: dict[str, Any] = {
        "quotas": {"L-1216C47A": 256.0, "L-DB2E81BA": 64.0, "L-B99A9384": 1000.0},
        "gpu_ami": True,
        "context": {
            "hardware": "t4,c6i.large",
            "worker_wheels": str(fake_wheelhouse(tmp_path / "wheels")),
            "models": str(models),
        },
    }

    def factory(region: str, endpoint: str | None) -> Any:
        def make(service: str) -> Any:
            if service == "service-quotas":
                return FakeQuotas(state["quotas"])
            client = boto3.client(service, region_name=region)
            return SsmWithPublicGpuAmi(client, state["gpu_ami"]) if service == "ssm" else client

        return make

    monkeypatch.setattr(deploy, "_boto_factory", factory)
    return state


def _check(world: dict[str, Any], capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    args = ["deploy", "check"]
    for key, value in world["context"].items():
        args += ["-c", f"{key}={value}"]
    code = main([*args, *extra])
    got = capsys.readouterr()
    return code, got.out + got.err


def test_good_configuration_passes_every_check(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _check(world, capsys)
    assert code == 0, out
    names = [line.split()[1] for line in out.splitlines()]
    for name in ("account", "bootstrap", "quota", "ami", "gpu", "wheelhouse", "lambda", "models", "prices"):
        assert name in names, (name, out)
    assert f"-> {GPU_AMI}" in out and "version 28" in out
    assert "blocked" not in out


def test_json_lists_every_check(world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _check(world, capsys, "--json")
    doc = json.loads(out)  # stderr is empty
    assert code == 0 and doc["ok"] is True and doc["blockers"] == []
    names = {c["name"] for c in doc["checks"]}
    assert {"account", "bootstrap", "quota L-1216C47A", "quota L-DB2E81BA", "quota lambda"} <= names
    assert {"ami cpu", "ami gpu", "gpu t4", "wheelhouse cpu", "wheelhouse gpu", "models", "prices"} <= names


def test_missing_bootstrap_blocks(world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    boto3.client("cloudformation", region_name=REGION).delete_stack(StackName=deploy.BOOTSTRAP_STACK)
    code, out = _check(world, capsys)
    assert code == 1
    assert "FAIL  bootstrap" in out and "cdk bootstrap aws://" in out
    assert out.strip().splitlines()[-1] == "blocked: bootstrap"


def test_gpu_quota_zero_blocks(world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    del world["quotas"]["L-DB2E81BA"]  # never requested: AWS's default for G and VT is 0 vCPUs
    code, out = _check(world, capsys)
    assert code == 1
    assert "not one instance can launch" in out
    assert out.strip().splitlines()[-1] == "blocked: quota L-DB2E81BA"


def test_quota_below_the_maxima_warns(world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    world["quotas"]["L-DB2E81BA"] = 8.0  # two g4dn.xlarge of the group's 10
    code, out = _check(world, capsys)
    assert code == 0
    assert "warn  quota L-DB2E81BA" in out and "need 40" in out  # 10 x 4 vCPUs


def test_unbuilt_wheelhouse_blocks(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    world["context"]["worker_wheels"] = str(tmp_path / "empty")
    code, out = _check(world, capsys)
    assert code == 1
    assert "python -m cdk.deps worker" in out
    assert out.strip().splitlines()[-1] == "blocked: wheelhouse cpu, wheelhouse gpu"


def test_reserved_concurrency_above_a_new_accounts_limit_blocks(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    world["quotas"]["L-B99A9384"] = 10.0  # a new account's concurrency limit
    world["context"]["planner_concurrency"] = "4"
    code, out = _check(world, capsys)
    assert code == 1 and "blocked: quota lambda" in out
    del world["context"]["planner_concurrency"]  # the default reserves nothing: deployable
    assert _check(world, capsys)[0] == 0


def test_volta_and_unresolvable_ami_block(world: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    world["context"]["hardware"] = "t4,v100,c6i.large"
    world["quotas"]["L-417A185B"] = 64.0
    world["gpu_ami"] = False
    code, out = _check(world, capsys)
    assert code == 1
    assert "FAIL  gpu v100" in out and "-c hardware=t4,c6i.large" in out
    assert "FAIL  ami gpu" in out and "ParameterNotFound" in out


def test_wrong_account_and_bad_context_are_one_line(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    world["context"]["account"] = "210987654321"
    code, out = _check(world, capsys)
    assert code == 1 and "credentials are for account 123456789012" in out
    world["context"]["hardware"] = "a100"
    code, out = _check(world, capsys)
    assert code == 1 and "unknown hardware 'a100'" in out


@pytest.fixture
def moto_server() -> Iterator[str]:
    """A moto server on a free port (its own process state: no mock_aws in these tests)."""
    import socket

    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def test_endpoint_points_every_client_at_a_moto_server(
    moto_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """GIVEN a bootstrapped moto server WHEN ``--endpoint`` names it (the real client factory, no
    fakes) THEN the account, bootstrap and CPU AMI checks are answered there, and what moto does not
    serve (Service Quotas, the DLAMI's parameter) is a FAIL line naming the call, not a traceback."""
    url = moto_server
    boto3.client("cloudformation", region_name=REGION, endpoint_url=url).create_stack(
        StackName=deploy.BOOTSTRAP_STACK,
        TemplateBody=json.dumps({"Resources": {"Q": {"Type": "AWS::SQS::Queue"}}}),
    )
    boto3.client("ssm", region_name=REGION, endpoint_url=url).put_parameter(
        Name=deploy.BOOTSTRAP_VERSION_PARAMETER, Value="28", Type="String"
    )
    code = main(["deploy", "check", "--endpoint", url, "--json", "-c", "hardware=t4,c6i.large"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert code == 1
    assert checks["account"]["status"] == "ok" and ACCOUNT in checks["account"]["detail"]
    assert checks["bootstrap"]["status"] == "ok" and "version 28" in checks["bootstrap"]["detail"]
    assert checks["ami cpu"]["status"] == "ok"
    assert checks["quotas"]["status"] == "FAIL"  # moto serves no Service Quotas
    assert checks["ami gpu"]["status"] == "FAIL" and "ParameterNotFound" in checks["ami gpu"]["detail"]
