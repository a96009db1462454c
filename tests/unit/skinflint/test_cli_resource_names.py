"""A malformed resource name in the environment (``SKINFLINT_BUCKET``, ``SKINFLINT_CONFIG_TABLE``,
``SKINFLINT_RESULTS_TABLE``, ``SKINFLINT_METRICS_NAMESPACE``) stops ``skinflint apps``, ``status``
and ``report`` with one line on stderr naming the setting, exit 1, before any client is made -- not
botocore's ``ParamValidationError`` traceback at the first call. No AWS: the clients are fakes."""

from __future__ import annotations

from typing import Any

import pytest

import core.clients
from skinflint.cli import main

COMMANDS = [
    pytest.param(["apps", "list"], id="apps-list"),
    pytest.param(["apps", "show", "cams"], id="apps-show"),
    pytest.param(["status"], id="status"),
    pytest.param(["report", "--since", "5m"], id="report"),
    pytest.param(["report", "--endpoint", "http://127.0.0.1:5000"], id="report-local"),
]

BAD_SETTINGS = [
    pytest.param("SKINFLINT_BUCKET", "my frames", "an S3 bucket name", id="bucket-space"),
    pytest.param("SKINFLINT_BUCKET", "Skinflint-Frames", "an S3 bucket name", id="bucket-upper-case"),
    pytest.param("SKINFLINT_CONFIG_TABLE", "t", "a DynamoDB table name", id="config-table-short"),
    pytest.param("SKINFLINT_CONFIG_TABLE", "skinflint/config", "a DynamoDB table name", id="config-table-slash"),
    pytest.param("SKINFLINT_RESULTS_TABLE", "", "a DynamoDB table name", id="results-table-empty"),
    pytest.param("SKINFLINT_METRICS_NAMESPACE", "", "a CloudWatch namespace", id="namespace-empty"),
    pytest.param("SKINFLINT_METRICS_NAMESPACE", "AWS/Skinflint", "a CloudWatch namespace", id="namespace-aws"),
]  # fmt: skip


@pytest.mark.parametrize(("setting", "value", "what"), BAD_SETTINGS)
@pytest.mark.parametrize("argv", COMMANDS)
def test_a_malformed_name_is_one_line_naming_the_setting_before_any_client(
    argv: list[str],
    setting: str,
    value: str,
    what: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    made: list[str] = []

    def make_client(service: str, _cfg: Any) -> Any:
        made.append(service)
        raise AssertionError("no client is made")

    monkeypatch.setattr(core.clients, "make_client", make_client)
    monkeypatch.setenv(setting, value)
    assert main(argv) == 1
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in captured.err, captured.err
    assert err.startswith(f"skinflint: error: {setting} must be {what} ("), err
    assert err.endswith(f"got {value!r}"), err
    assert captured.out == "" and made == []
