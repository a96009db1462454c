"""``skinflint loadtest`` / ``skinflint report`` argument handling: one-line errors, no traceback."""

from __future__ import annotations

import argparse

import pytest

from skinflint.cli import main
from skinflint.commands.report import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90.0), ("90s", 90.0), ("5m", 300.0), ("1.5h", 5400.0), ("2d", 172800.0)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5m", "5x", "m"])
def test_bad_durations(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["loadtest", "--target", "http://127.0.0.1:9", "--api-key", "k", "--plan-rate", "4"],
            "local stack only",
        ),
        (
            ["loadtest", "--target", "http://127.0.0.1:9", "--api-key", "k", "--retention", "2h"],
            "local stack only",
        ),
        (
            ["loadtest", "--duration", "30m", "--retention", "35m"],
            "--retention must be at least the run plus",
        ),
        (["up", "--retention", "5m"], "--retention must be at least the run plus 10 min"),
        (["demo", "--retention", "400d"], "--retention must be at most 365 days"),
        (["demo", "--frames-per-post", "0"], "--frames-per-post must be between 1 and 10"),
        (["demo", "--frames-per-post", "11"], "--frames-per-post must be between 1 and 10"),
        (["loadtest", "--rate", "-1"], "--rate must be positive"),
        (["loadtest", "--frames-per-post", "0"], "--frames-per-post must be between 1 and 10"),
        (["loadtest", "--frames-per-post", "11"], "--frames-per-post must be between 1 and 10"),
        (["loadtest", "--target", "http://127.0.0.1:9"], "needs --api-key"),
        (["loadtest", "--target", "http://127.0.0.1:9", "--api-key", "k"], "cannot reach"),
    ],
)
def test_usage_errors_are_one_line(argv, message, capsys, monkeypatch):
    monkeypatch.delenv("SKINFLINT_API_KEY", raising=False)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_local_stack_keeps_results_an_hour_past_the_run_by_default():
    from skinflint.commands.up import stack_retention

    assert stack_retention(None) == 3600.0  # skinflint up
    assert stack_retention(None, 900.0) == 4500.0  # a 15 min run: its results are read after it
    assert stack_retention(1500.0, 900.0) == 1500.0


def test_the_demo_posts_consecutive_frames_up_to_n_per_post():
    from skinflint.commands.demo import _posts

    assert [list(p) for p in _posts(23, 10)] == [list(range(10)), list(range(10, 20)), [20, 21, 22]]
    assert [list(p) for p in _posts(3, 1)] == [[0], [1], [2]]
    assert sum(map(len, _posts(240, 7))) == 240
