"""`skinflint bench simulator --reserve-study`: a shed_target's reserve kept from the registered rate
against chosen again at the new rate (what control/reserves.py does)."""

from __future__ import annotations

from typing import Any

from bench.simulator import reserve_study
from skinflint.cli import main


def test_choosing_again_never_meets_the_target_for_fewer_apps() -> None:
    out = reserve_study(4, factors=(0.5, 2.0))
    assert out["apps"] == 4
    for key in ("x0.5", "x2"):
        row = out[key]
        assert row["apps"] == 4
        # the kept reserve is one of the steps the search tries, with the same simulation: when it meets
        # the target, the search stops at it or at a smaller one that meets it too
        assert row["reviewed_met"] >= row["stale_met"]
        assert row["reviewed_shed_max"] is not None and row["stale_shed_max"] is not None
        assert row["raised"] + row["lowered"] <= row["apps"]


def test_the_study_prints_a_table(capsys: Any) -> None:
    assert main(["bench", "simulator", "--reserve-study", "2"]) == 0
    out = capsys.readouterr().out
    assert "shed_target 0.01 on 2 generated apps" in out and "x0.5" in out and "x2" in out
