"""Every error of the ``skinflint`` package is a :class:`SkinflintError`; the local stack's and the
report's errors are not the data plane's (``core.errors.DataPlaneError``), and a user still sees
them as before: one line on stderr naming what failed, and exit 1."""

from __future__ import annotations

from typing import Any

import pytest

import core.clients
import skinflint.commands.demo
import skinflint.commands.up
import skinflint.report
from core.errors import DataPlaneError
from skinflint.cli import main
from skinflint.errors import SkinflintError, UsageError
from skinflint.local.stack import StackError
from skinflint.report import ReportError


@pytest.mark.parametrize("error", [UsageError, StackError, ReportError])
def test_every_error_of_the_cli_is_a_skinflint_error_and_none_is_the_data_planes(error: type) -> None:
    assert issubclass(error, SkinflintError)
    assert not issubclass(error, DataPlaneError)


class FailingStack:
    """A local stack whose start fails as a process of it does."""

    stopped = False

    def start(self) -> Any:
        raise StackError("front exited with 1 (log: /tmp/front.log)", "/tmp/front.log")

    def stop(self) -> None:
        FailingStack.stopped = True


@pytest.mark.parametrize(
    ("argv", "module"),
    [(["up"], skinflint.commands.up), (["demo", "--duration", "1"], skinflint.commands.demo)],
    ids=["up", "demo"],
)
def test_a_stack_that_fails_to_start_is_one_line_and_exit_1(
    argv: list[str], module: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    FailingStack.stopped = False
    monkeypatch.setattr(module, "make_stack", lambda *_args, **_kw: FailingStack())
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.splitlines()[-1] == (
        "skinflint: error: local stack failed to start: front exited with 1 (log: /tmp/front.log)"
    ), err
    assert "Traceback" not in err
    assert FailingStack.stopped


def test_a_report_that_cannot_read_cloudwatch_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def collect_report(*_args: Any, **_kw: Any) -> dict[str, Any]:
        raise ReportError("GetMetricData failed: Could not connect\nsecond line")

    monkeypatch.setattr(core.clients, "make_client", lambda _service, _cfg: object())
    monkeypatch.setattr(skinflint.report, "collect_report", collect_report)
    assert main(["report", "--endpoint", "http://localhost:4566"]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == (
        "skinflint: error: cannot build the report from http://localhost:4566: "
        "GetMetricData failed: Could not connect"
    ), captured.err
    assert captured.out == ""
