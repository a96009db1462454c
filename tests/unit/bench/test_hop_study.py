"""``skinflint bench simulator --hop-study``: samples loaded from either format, the study's figures."""

from __future__ import annotations

import json

import pytest

from bench.errors import BenchError
from bench.simulator.hops import DEFAULT_HOPS, hop_study, load_hops, with_hops_in_slo
from planner.generate import generate_problem


def test_the_packaged_samples_load_with_their_provenance():
    hops, about = load_hops(DEFAULT_HOPS)
    assert len(hops) > 1000 and min(hops) >= 0
    assert "local-stack demo" in about and "Not an AWS measurement" in about


def test_a_demo_tasks_file_is_read_by_its_delivery_column(tmp_path):
    path = tmp_path / "tasks.jsonl"
    rows = [{"delivery_s": 0.03}, {"delivery_s": None}, {"delivery_s": 0.05}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    hops, about = load_hops(path)
    assert hops == [0.03, 0.05] and "3 tasks" in about


@pytest.mark.parametrize(
    ("text", "suffix", "what"),
    [
        ("{}", ".json", "not hop samples"),
        ('{"delays_ms": []}', ".json", "no hop samples"),
        ("x", ".jsonl", "not"),
    ],
)
def test_bad_sample_files_are_one_line(tmp_path, text, suffix, what):
    path = tmp_path / f"hops{suffix}"
    path.write_text(text)
    with pytest.raises(BenchError, match=what) as err:
        load_hops(path)
    assert "\n" not in str(err.value)
    with pytest.raises(BenchError, match="cannot read"):
        load_hops(tmp_path / "missing.json")


def test_the_slo_gets_one_hop_per_module_of_the_longest_path():
    problem = generate_problem(3)  # actdet: a chain of three modules
    assert with_hops_in_slo(problem, 0.05).slo_s == pytest.approx(problem.slo_s + 3 * 0.05)


def test_the_study_plans_with_the_p99_and_compares_the_bills():
    # deliveries of 10-30 ms: the planned hop is the 20 ms floor rounded... up to the p99 (30 ms)
    study = hop_study(3, 3.0, [0.01, 0.02, 0.03] * 40)
    assert study["hops"]["planned_hop_s"] == 0.03
    assert study["planned"] == 3 and study["compared_apps"] == 3
    # no delivery is later than the planned hop: the drawn and the constant hops agree
    assert study["apps_below_99"] == study["constant_hop"]["apps_below_99"] == 0
    # the hop billed as device time never plans a cheaper fleet
    assert study["per_hour"] <= study["device_model_per_hour"]
