"""``skinflint apps`` / ``skinflint report`` against an AWS that fails: an error answer, no answer
(endpoint unreachable, read timeout) or no credentials is one line on stderr and exit 1, as the
adapters' own errors are (``core.adapters._aws.AWS_ERRORS``); a ``ParamValidationError`` (a
request of ours botocore refused) is not taken for the user's error and propagates. A malformed
region or endpoint (the user's: a flag or the environment) is one line before any client is made.
Tiny fake clients in place of boto3's, no moto, no network."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import yaml
from botocore.exceptions import (
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    ReadTimeoutError,
)

import core.clients
from control.errors import ControlError
from skinflint.cli import main
from skinflint.commands.apps import aws_errors
from skinflint.commands.report import build_report
from skinflint.errors import UsageError
from tests.unit.core.test_aws_network_errors import ENDPOINT, FakeClient, service_error

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

#: what an AWS call may raise that the commands report in one line, and a text its line carries
FAILURES = [
    pytest.param(lambda: EndpointConnectionError(endpoint_url=ENDPOINT), ENDPOINT, id="unreachable"),
    pytest.param(lambda: ReadTimeoutError(endpoint_url=ENDPOINT), ENDPOINT, id="read-timeout"),
    pytest.param(NoCredentialsError, "Unable to locate credentials", id="no-credentials"),
    pytest.param(lambda: service_error("AccessDenied", "GetObject"), "AccessDenied", id="service-error"),
]

SPEC = {
    "name": "cams",
    "slo_s": 0.5,
    "rate": 1.0,
    "modules": {"det": {"model": "det-net"}},
}


def fail_every_call(monkeypatch: pytest.MonkeyPatch, error: Exception) -> list[FakeClient]:
    """Every client the commands make is a fake on which every call raises ``error``, except that S3
    has no stored hardware catalog (the packaged one is read): the calls that fail are the command's
    own (the registry, the admin key, the metrics)."""
    made: list[FakeClient] = []

    def make_client(service: str, _cfg: Any) -> FakeClient:
        answers = {"get_object": service_error("NoSuchKey", "GetObject")} if service == "s3" else {}
        made.append(FakeClient(error, answers))
        return made[-1]

    monkeypatch.setattr(core.clients, "make_client", make_client)
    return made


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("skinflint: error: "), err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(("make_error", "shown"), FAILURES)
@pytest.mark.parametrize(
    ("argv", "what"),
    [
        pytest.param(["apps", "list"], "cannot list apps", id="apps-list"),
        pytest.param(["apps", "show", "cams"], "cannot read app cams", id="apps-show"),
        pytest.param(["apps", "remove", "cams"], "cannot remove cams", id="apps-remove"),
        pytest.param(["apps", "register", "{spec}"], "cannot register cams.yaml", id="apps-register"),
        pytest.param(["apps", "register", "{spec}", "--dry-run"], "cannot register cams.yaml", id="dry-run"),
        pytest.param(["apps", "admin-key"], "cannot store the admin key", id="apps-admin-key"),
        pytest.param(["report", "--since", "5m"], "cannot build the report from CloudWatch in us-east-1", id="report"),
    ],
)  # fmt: skip
def test_an_aws_failure_is_one_line_and_exit_1(
    argv: list[str],
    what: str,
    make_error: Callable[[], Exception],
    shown: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = tmp_path / "cams.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    made = fail_every_call(monkeypatch, make_error())
    # WHEN every AWS call of the command fails
    rc = main([a.format(spec=spec) for a in argv])
    # THEN one line naming what could not be done and why, exit 1, nothing on stdout
    err = one_line(capsys)
    assert rc == 1
    assert err.startswith(f"skinflint: error: {what}: ") and shown in err, err
    assert any(c.calls for c in made)  # it failed at AWS, not before


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["apps", "list"], id="apps-list"),
        pytest.param(["apps", "register", "{spec}"], id="apps-register"),
        pytest.param(["report", "--since", "5m"], id="report"),
    ],
)
def test_a_request_botocore_refuses_is_not_taken_for_a_user_error(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``ParamValidationError`` is a request of ours that botocore refused before sending it: a bug
    to be seen with its traceback, not a one-line "cannot ..." that blames AWS or the user."""
    spec = tmp_path / "cams.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    fail_every_call(monkeypatch, ParamValidationError(report="Invalid type for parameter Bucket"))
    with pytest.raises(ParamValidationError):
        main([a.format(spec=spec) for a in argv])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["apps", "list"], {"AWS_DEFAULT_REGION": "us east"}, "'us east' is not an AWS region name"),
        (["apps", "list"], {"AWS_DEFAULT_REGION": ""}, "'' is not an AWS region name"),
        (["apps", "show", "cams", "--endpoint", "localhost:5000"], {}, "'localhost:5000' is not an endpoint URL"),
        (["report", "--region", "eu_west_1"], {}, "'eu_west_1' is not an AWS region name"),
        (["report", "--endpoint", "http://"], {}, "'http://' is not an endpoint URL"),
        (["apps", "list"], {"SKINFLINT_ENDPOINT_URL": "moto"}, "'moto' is not an endpoint URL"),
    ],
)  # fmt: skip
def test_a_malformed_region_or_endpoint_is_one_line_before_any_client_is_made(
    argv: list[str],
    env: dict[str, str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # botocore would raise ValueError (InvalidRegionError, "Invalid endpoint: ...") making the client
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    made = fail_every_call(monkeypatch, AssertionError("no client is made"))
    assert main(argv) == 1
    assert message in one_line(capsys)
    assert made == []


@pytest.mark.parametrize(
    ("region", "endpoint"),
    [("us-east-1", None), ("eu-west-1", "http://127.0.0.1:5000"), ("us-east-1", "http://[::1]:5000")],
)
def test_a_wellformed_region_and_endpoint_reach_the_clients(
    region: str, endpoint: str | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    made = fail_every_call(monkeypatch, EndpointConnectionError(endpoint_url=ENDPOINT))
    argv = ["report", "--region", region] + (["--endpoint", endpoint] if endpoint else [])
    assert main(argv) == 1
    assert f"cannot build the report from {endpoint or 'CloudWatch in ' + region}: " in one_line(capsys)
    assert made and made[0].calls == ["list_metrics"]


@pytest.mark.parametrize(("make_error", "shown"), FAILURES)
def test_the_guard_turns_a_raw_aws_error_into_one_line(
    make_error: Callable[[], Exception], shown: str
) -> None:
    # every adapter wraps its calls; a call that does not (a new one) still gives one line
    with pytest.raises(UsageError, match="^cannot list apps: ") as raised, aws_errors("cannot list apps"):
        raise make_error()
    assert shown in str(raised.value) and len(str(raised.value).splitlines()) == 1
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_the_guard_keeps_the_first_line_of_an_adapters_error() -> None:
    with pytest.raises(UsageError, match="^cannot remove cams: gone$"), aws_errors("cannot remove cams"):
        raise ControlError("gone\nsecond line")


@pytest.mark.parametrize(
    "error",
    [
        ParamValidationError(report="Invalid bucket name"),
        NoRegionError(),
        KeyError("Item"),  # a response we misread: a bug too
    ],
    ids=["param-validation", "no-region", "bug"],
)
def test_the_guard_lets_a_bug_of_ours_propagate(error: Exception) -> None:
    with pytest.raises(type(error)), aws_errors("cannot list apps"):
        raise error


@pytest.mark.parametrize(("make_error", "shown"), FAILURES)
def test_build_report_turns_a_raw_aws_error_into_one_line(
    make_error: Callable[[], Exception], shown: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import skinflint.report

    error = make_error()

    def collect_report(*_a: Any, **_k: Any) -> Any:
        raise error  # as a call outside the adapters would

    fail_every_call(monkeypatch, AssertionError("not called"))
    monkeypatch.setattr(skinflint.report, "collect_report", collect_report)
    with pytest.raises(UsageError, match="^cannot build the report from CloudWatch in us-east-1: ") as raised:
        build_report(endpoint=None, apps=None, start=0.0, end=60.0)
    assert shown in str(raised.value) and raised.value.__cause__ is error
