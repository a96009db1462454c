"""``skinflint report --period``: a positive whole number of seconds; 0 or less is a one-line usage
error (0 used to be taken for "not given"), not given is the default (60 s against CloudWatch, 10 s
against the local stack's moto). No AWS: the clients and the collection are fakes."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

import core.clients
import skinflint.report
from skinflint.cli import build_parser, main
from skinflint.commands.report import CLOUDWATCH_PERIOD_S, LOCAL_PERIOD_S, build_report
from skinflint.errors import UsageError


@pytest.fixture
def periods(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The period each report was collected with (fake clients, a fake collection)."""
    seen: list[int] = []

    def collect_report(_cw: Any, _ddb: Any, *, period_s: int, **_kw: Any) -> dict[str, Any]:
        seen.append(period_s)
        return {"window": {"period_s": period_s}}

    monkeypatch.setattr(core.clients, "make_client", lambda service, _cfg: object())
    monkeypatch.setattr(skinflint.report, "collect_report", collect_report)
    return seen


@pytest.mark.parametrize("given", ["0", "-1", "-60"])
def test_a_period_that_is_not_positive_is_one_line_and_exit_1(
    given: str, periods: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--period", given]) == 1
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err == f"skinflint: error: --period must be a positive number of seconds, got {int(given)}", err
    assert captured.out == ""
    assert periods == []  # refused before any AWS call


def test_build_report_refuses_a_period_of_zero_before_reading_the_settings(
    monkeypatch: pytest.MonkeyPatch, periods: list[int]
) -> None:
    monkeypatch.setenv("SKINFLINT_CONFIG_TABLE", "t")  # would be an error too: the period is first
    with pytest.raises(UsageError, match="^--period must be a positive number of seconds, got 0$"):
        build_report(endpoint=None, apps=None, start=0.0, end=600.0, period=0)
    assert periods == []


@pytest.mark.parametrize(
    ("endpoint", "want"),
    [(None, CLOUDWATCH_PERIOD_S), ("http://127.0.0.1:5000", LOCAL_PERIOD_S)],
)
def test_not_given_is_the_default_period(endpoint: str | None, want: int, periods: list[int]) -> None:
    report = build_report(endpoint=endpoint, apps=None, start=0.0, end=600.0, period=None)
    assert periods == [want] and report["window"]["period_s"] == want
    assert (CLOUDWATCH_PERIOD_S, LOCAL_PERIOD_S) == (60, 10)


@pytest.mark.parametrize("endpoint", [[], ["--endpoint", "http://127.0.0.1:5000"]])
def test_a_given_period_is_used_against_cloudwatch_and_moto(
    endpoint: list[str], periods: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--period", "30", "--json", *endpoint]) == 0
    assert periods == [30]
    assert json.loads(capsys.readouterr().out)["window"]["period_s"] == 30


def test_a_period_that_is_not_a_whole_number_is_argparses_usage_error(
    periods: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["report", "--period", "1.5"])
    assert exited.value.code == 2
    assert "argument --period: invalid int value: '1.5'" in capsys.readouterr().err
    assert periods == []


def test_the_help_says_what_the_type_accepts() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    report = sub.choices["report"]
    period = next(a for a in report._actions if a.dest == "period")
    assert period.type is int and period.default is None
    assert period.help is not None
    assert "positive whole number" in period.help
    assert f"default {CLOUDWATCH_PERIOD_S}; {LOCAL_PERIOD_S} with --endpoint" in period.help
