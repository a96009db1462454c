"""Load shapes and the analysis of a run (pure: no locust)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loadtest.analysis import read_outcomes, summarise_run
from loadtest.rates import LoadPlan, burst, diurnal, ramp


@pytest.mark.parametrize(
    ("shape", "x", "fraction"),
    [
        ("diurnal", 0.0, 0.1),  # trough at the start: 0.1 + 0.9 (1 - cos 0) / 2
        ("diurnal", 0.5, 1.0),  # peak at half time: 0.1 + 0.9 (1 - cos pi) / 2
        ("ramp", 0.0, 0.1),
        ("ramp", 1.0, 1.0),
        ("burst", 0.02, 2.0),  # 0.02 x 4 = 0.08: in the first 20 % of a quarter, twice the rate
        ("burst", 0.35, 1.0),  # 0.35 x 4 = 1.4 -> phase 0.4: between bursts
    ],
)
def test_shape_fractions(shape, x, fraction):
    fn = {"diurnal": diurnal, "ramp": ramp, "burst": burst}[shape]
    assert fn(x) == pytest.approx(fraction)


def test_steady_plan_offers_the_rate_with_cameras_of_one_frame_per_second():
    # 4 frames/s -> 4 cameras at 1 frame/s, 2 apps -> 8 users; then 10 s of drain with none; then the end
    plan = LoadPlan("steady", 4.0, 60.0, apps=2, drain_s=10.0)
    assert plan.fps == 1.0
    assert plan.tick(0.0) == (8, 8.0)
    assert plan.tick(59.9)[0] == 8
    assert plan.tick(60.0)[0] == 0 and plan.tick(69.9)[0] == 0
    assert plan.tick(70.0) is None
    # the drain stops every camera within a second (locust stops users at the spawn rate)
    assert plan.tick(60.0)[1] >= 8 and LoadPlan("burst", 40.0, 6.0).tick(6.0) == (0, 80.0)
    assert plan.expected_frames() == pytest.approx(240.0)


def test_high_rates_use_faster_cameras_not_more_users():
    plan = LoadPlan("steady", 500.0, 10.0)
    assert plan.fps == 10.0 and plan.users_per_app(0) == 50  # at most 50 cameras per app


def test_diurnal_plan_offers_less_than_the_peak_on_average():
    # mean of 0.1 + 0.9 (1 - cos) / 2 over a period = 0.55
    plan = LoadPlan("diurnal", 10.0, 100.0)
    assert plan.expected_frames(step_s=0.1) == pytest.approx(0.55 * 10 * 100, rel=0.03)
    assert plan.users_per_app(1.0) == 1  # never below one camera while the run lasts


def test_plan_round_trips_through_the_environment():
    plan = LoadPlan("burst", 3.0, 30.0, apps=2, drain_s=5.0)
    assert LoadPlan.from_env(plan.to_env()) == LoadPlan("burst", 3.0, 30.0, 2, 5.0, 1.0)
    batched = LoadPlan("steady", 4.0, 30.0, frames_per_post=5)
    assert LoadPlan.from_env(batched.to_env()).frames_per_post == 5
    assert LoadPlan.from_env({}).frames_per_post == 0  # by the SLO
    with pytest.raises(ValueError, match="unknown shape"):
        LoadPlan("square", 1.0, 1.0)
    with pytest.raises(ValueError, match="frames per POST"):
        LoadPlan("steady", 1.0, 1.0, frames_per_post=11)


def test_cameras_post_the_frames_of_half_the_slo_every_n_over_f_seconds():
    # 4 frames/s: cameras of 1 frame/s, an SLO of 0.4 s holds 0.4 of a frame: one per POST
    assert LoadPlan("steady", 4.0, 60.0).per_post(0.4) == 1
    # 500 frames/s: 50 cameras of 10 frames/s; half of 0.4 s holds 2 frames: a POST every 0.2 s
    fast = LoadPlan("steady", 500.0, 60.0)
    assert fast.per_post(0.4) == 2 and fast.post_interval_s(0.4) == pytest.approx(0.2)
    assert fast.per_post(5.0) == 10  # at most 10 (the JSON batch form's limit)
    fixed = LoadPlan("steady", 4.0, 60.0, frames_per_post=8)
    assert fixed.per_post(0.4) == 8 and fixed.post_interval_s(0.4) == pytest.approx(8.0)
    # batching leaves the frames offered as they were
    assert fixed.expected_frames() == LoadPlan("steady", 4.0, 60.0).expected_frames()


def test_the_pure_modules_do_not_import_locust():
    # locust monkey-patches the process on import: the CLI and these tests must not pull it in
    code = "import sys, loadtest.rates, loadtest.analysis; print('locust' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def rec(status: int, result: str | None = None, latency: float | None = None, **kw) -> dict:
    out = {"app": kw.pop("app", "traffic"), "sent_at": 0.0, "status": status, "post_ms": 10.0, **kw}
    if result:
        out["result"] = result
    if latency is not None:
        out.update(latency_s=latency, accepted_at=0.0, finished_at=latency, deadline=0.4)
    return out


def test_summary_counts_shedding_errors_drops_losses_and_slo(tmp_path):
    outcomes = (
        [rec(202, "done", 0.1 + 0.01 * i) for i in range(8)]  # 8 done, all within 0.4 s
        + [rec(202, "done", 0.5)]  # late
        + [rec(202, "dropped", drop_reasons=["deadline"])]
        + [rec(202, "lost")]
        + [rec(503, error="slot_full"), rec(429, error="rate_limited"), rec(500, error="boom"), rec(0)]
    )
    path = tmp_path / "o.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in outcomes))
    s = summarise_run(read_outcomes(path), [], duration_s=5.0)["total"]
    assert (s["offered"], s["accepted"], s["shed"], s["errors"]) == (15, 11, 2, 2)
    assert (s["answered"], s["dropped"], s["lost"]) == (9, 1, 1)
    assert s["slo_attainment"] == pytest.approx(8 / 11)  # dropped and lost count as misses
    assert s["slo_attainment_answered"] == pytest.approx(8 / 9)
    assert s["shed_by_reason"] == {"503 slot_full": 1, "429 rate_limited": 1}
    assert s["errors_by_kind"] == {"500 boom": 1, "0": 1}
    assert s["drop_reasons"] == {"deadline": 1}
    assert s["rps"] == pytest.approx(3.0) and s["accepted_rps"] == pytest.approx(11 / 5)
    assert s["latency_p50_s"] == pytest.approx(0.14) and s["latency_max_s"] == 0.5
    assert s["posts"] == 15 and s["frames_per_post"] == 1.0  # lines without post_index: a POST each


def test_post_figures_count_each_post_once():
    # a POST of 3 frames (100 ms) answered 202, one of 2 shed (50 ms), a single frame (10 ms)
    outcomes = (
        [rec(202, "done", 0.1, post_ms=100.0, post_frames=3, post_index=i) for i in range(3)]
        + [rec(503, error="slot_full", post_ms=50.0, post_frames=2, post_index=i) for i in range(2)]
        + [rec(202, "done", 0.2)]
    )
    s = summarise_run(outcomes, [], duration_s=2.0)["total"]
    assert (s["offered"], s["posts"], s["accepted"], s["shed"]) == (6, 3, 4, 2)
    assert s["frames_per_post"] == pytest.approx(2.0) and s["rps"] == pytest.approx(3.0)
    assert s["shed_by_reason"] == {"503 slot_full": 2}  # every frame of the shed POST
    assert s["post_p50_ms"] == pytest.approx(50.0) and s["post_p99_ms"] == pytest.approx(100.0, rel=0.02)
