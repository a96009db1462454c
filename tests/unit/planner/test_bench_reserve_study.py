"""bench/simulator.py --reserve-study: a shed_target's reserve kept from the registered rate against
chosen again at the new rate (what control/reserves.py does)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[3] / "bench" / "simulator.py"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_simulator", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_choosing_again_never_meets_the_target_for_fewer_apps() -> None:
    out = _bench().reserve_study(4, factors=(0.5, 2.0))
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
    assert _bench().main(["--reserve-study", "2"]) == 0
    out = capsys.readouterr().out
    assert "shed_target 0.01 on 2 generated apps" in out and "x0.5" in out and "x2" in out
