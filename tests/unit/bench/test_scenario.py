"""The diurnal scale scenario (bench/scenario/): load, forecasting from the past only, shedding
arithmetic, caches, a tiny day end to end, and the `skinflint bench diurnal` command."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from bench.scenario import (
    AppTemplate,
    LoadConfig,
    PolicyConfig,
    ScenarioReport,
    SimCache,
    SolveCache,
    diurnal_shape,
    make_load,
    plan_capacity,
    run_adaptive,
    run_scenario,
    serve_epoch,
)
from bench.scenario.day import _Day
from planner.models import AppSpec, HardwareSpec, MachineGroup, ModulePlan, Plan, ProfileEntry
from skinflint.cli import main

# --------------------------------------------------------------------------- a tiny synthetic app


def _entries(hw: str, base: float, per: float, batches: tuple[int, ...]) -> list[ProfileEntry]:
    return [ProfileEntry(hardware=hw, batch=b, duration_s=round(base + per * b, 6)) for b in batches]


def _template(kind: str = "chain") -> AppTemplate:
    """detector -> classifier (2 requests per frame); a GPU and a CPU class; SLO 0.25 s."""
    spec = AppSpec(
        name=kind,
        slo_s=0.25,
        modules={"det": {"model": "det_m"}, "cls": {"model": "cls_m"}},
        edges=[("det", "cls", 2.0)],
    )
    profiles = {
        "det_m": _entries("gpu", 0.004, 0.001, (1, 2, 4, 8, 16)) + _entries("cpu", 0.002, 0.02, (1, 2, 4)),
        "cls_m": _entries("gpu", 0.002, 0.0005, (1, 2, 4, 8, 16, 32)) + _entries("cpu", 0.001, 0.01, (1, 2)),
    }
    hardware = {"gpu": HardwareSpec(price_per_hour=1.0), "cpu": HardwareSpec(price_per_hour=0.1)}
    return AppTemplate(kind, spec, profiles, hardware)


TEMPLATES = {"chain": _template("chain"), "other": _template("other")}
TINY = LoadConfig(apps=3, peak_rps=400.0, epochs=24, seed=3, history_epochs=4)
FAST = PolicyConfig(sample_s=0.5, headroom=0.2)


# --------------------------------------------------------------------------- load


def test_diurnal_shape_has_its_trough_peak_and_wraps():
    hours = np.array([4.0, 20.0, 0.0, 24.0, 28.0])
    lo, hi, midnight, midnight2, four = diurnal_shape(hours, trough=0.2)
    assert lo == pytest.approx(0.2) and hi == pytest.approx(1.0)
    assert midnight == pytest.approx(midnight2) and four == pytest.approx(lo)
    fine = diurnal_shape(np.linspace(0, 24, 24 * 60 * 10), trough=0.2)
    assert fine.min() == pytest.approx(0.2) and fine.max() == pytest.approx(1.0)
    assert np.max(np.abs(np.diff(fine))) < 1e-3  # smooth: no jump between 6-second samples


def test_load_is_seeded_and_its_busiest_minute_is_the_peak():
    a, b = make_load(TINY, ["chain", "other"]), make_load(TINY, ["chain", "other"])
    assert np.array_equal(a.rates, b.rates) and a.names == b.names
    assert a.total().max() == pytest.approx(400.0)
    assert a.rates.shape == (3, 4 * 60 + 1440)
    assert np.all(np.diff(a.shares) < 0) and a.shares.sum() == pytest.approx(1.0)
    assert set(a.kinds) == {"chain", "other"}
    c = make_load(TINY.model_copy(update={"seed": 4}), ["chain", "other"])
    assert not np.array_equal(a.rates, c.rates)


def test_burst_multiplies_the_hit_apps_only():
    cfg = TINY.model_copy(update={"burst_apps": 1, "burst_factor": 3.0, "burst_minutes": 30, "noise": 0.0})
    burst = make_load(cfg, ["chain"])
    calm = make_load(cfg.model_copy(update={"burst_factor": 1.0}), ["chain"])
    (hit,) = burst.burst["apps"]  # type: ignore[misc]
    i = burst.names.index(hit)
    start = burst.history + int(burst.burst["start_minute"])  # type: ignore[call-overload]
    ratio = burst.rates[:, start + 10] / calm.rates[:, start + 10]  # 10 minutes in: fully ramped up
    others = [j for j in range(3) if j != i]
    assert ratio[i] == pytest.approx(3.0 * ratio[others[0]])  # both share the peak renormalisation
    assert np.allclose(ratio[others], ratio[others[0]])
    before = burst.rates[:, start - 60] / calm.rates[:, start - 60]
    assert np.allclose(before, before[0])


def test_epochs_must_divide_the_day():
    with pytest.raises(ValidationError, match="divide"):
        LoadConfig(epochs=7)


# --------------------------------------------------------------------------- forecasting and serving


def test_forecasts_use_only_past_epochs():
    load = make_load(TINY, ["chain"])
    day = _Day(load, TEMPLATES, FAST, None, None)
    before = day.forecasts()
    e = 10
    changed = make_load(TINY, ["chain"])
    changed.rates[:, changed.history + e * changed.epoch_minutes :] *= 5.0  # epoch 10 onwards
    after = _Day(changed, TEMPLATES, FAST, None, None).forecasts()
    assert np.array_equal(before[: e + 1], after[: e + 1])  # epoch 10 is planned before it is seen
    assert np.all(after[e + 1] > before[e + 1])


def _plan() -> Plan:
    # det: 2 machines x 100 req/s = 200 req/s -> 200 frames/s; cls: 1 x 300 req/s at 2 per frame -> 150
    det = ModulePlan(
        latency_budget_s=0.1,
        worst_case_latency_s=0.05,
        groups=[MachineGroup(hardware="gpu", batch=4, machines=2, rate_per_machine=100.0, duration_s=0.008)],
    )
    cls = ModulePlan(
        latency_budget_s=0.1,
        worst_case_latency_s=0.05,
        groups=[MachineGroup(hardware="gpu", batch=8, machines=1, rate_per_machine=300.0, duration_s=0.006)],
    )
    return Plan(objective="billed", cost_per_hour=2.0, billed_per_hour=3.0, solve_ms=0.0,
                modules={"det": det, "cls": cls})  # fmt: skip


def test_capacity_is_the_tightest_module_in_frames():
    assert plan_capacity(_plan(), {"det": 1.0, "cls": 2.0}) == pytest.approx(150.0)  # min(200/1, 300/2)


def test_shedding_is_the_excess_over_capacity_minute_by_minute():
    rates = np.array([100.0, 150.0, 180.0, 240.0])  # capacity 150: 30 + 90 frames/s over it
    cfg = FAST.model_copy(update={"simulate": False})
    s = serve_epoch(_template(), "a", _plan(), rates, cfg)
    assert s.offered == pytest.approx(670.0 * 60)
    assert s.shed == pytest.approx(120.0 * 60)
    assert s.within == pytest.approx(550.0 * 60)  # not simulated: every admitted frame counts
    none = serve_epoch(_template(), "a", None, rates, cfg)
    assert none.shed == none.offered and none.within == 0.0


def test_simulated_epoch_weights_each_minute_by_its_level():
    sims = SimCache()
    rates = np.array([60.0, 60.2, 90.0])  # grid 1.02 ** k: 60 and 60.2 share the level 60.28
    s = serve_epoch(_template(), "a", _plan(), rates, FAST, sims=sims)
    assert sims.misses == 2
    assert 0.0 <= s.within <= s.offered - s.shed + 1e-9
    again = serve_epoch(_template(), "b", _plan(), rates, FAST, sims=sims)  # another app, same plan
    assert sims.misses == 2 and sims.hits == 2 and again.within == pytest.approx(s.within)


def test_random_arrivals_go_through_the_window_admission_and_its_shed_counts_as_shed():
    # an SLO the plan meets with no window to spare (its own: 20 ms + 8 ms + the classifier's 50 ms
    # planned; the next det window would end 20 ms later): a frame whose window is full cannot wait
    tight = _template()
    tight = AppTemplate(
        tight.kind, tight.spec.model_copy(update={"slo_s": 0.08}), tight.profiles, tight.hardware
    )
    rates = np.array([140.0, 140.0])  # below the capacity (150): nothing shed minute by minute
    uniform = serve_epoch(tight, "a", _plan(), rates, FAST.model_copy(update={"sample_s": 4.0}))
    assert uniform.shed == 0.0 and uniform.attainment == 1.0
    cfg = FAST.model_copy(update={"sample_s": 4.0, "arrivals": "poisson"})
    poisson = serve_epoch(tight, "a", _plan(), rates, cfg)
    assert poisson.offered == uniform.offered
    # Poisson frames that find their window full are shed by the front: counted as shed, and the
    # attainment is of the rest
    assert 0 < poisson.shed < poisson.offered / 2
    assert poisson.within <= poisson.offered - poisson.shed + 1e-6
    assert poisson.attainment == pytest.approx(poisson.within / (poisson.offered - poisson.shed))


def test_solve_cache_ignores_the_name_and_returns_copies():
    cache = SolveCache()
    t = _template()
    p1 = cache(t.problem("a", 120.0))
    p2 = cache(t.problem("b", 120.0))
    assert (cache.misses, cache.hits) == (1, 1)
    p1.model_extra["mark"] = 1  # type: ignore[index]
    assert "mark" not in (p2.model_extra or {})
    cache(t.problem("a", 130.0))
    assert cache.misses == 2


# --------------------------------------------------------------------------- a tiny day


def test_adaptive_day_pays_for_at_least_the_packed_fleet():
    load = make_load(TINY, ["chain", "other"])
    res = run_adaptive(load, TEMPLATES, FAST.model_copy(update={"simulate": False}))
    assert len(res.epochs) == 24
    for r in res.epochs:
        assert r.billed_per_hour >= r.packed_per_hour - 1e-9  # hysteresis never pays for less
        assert r.capacity_rps >= 0 and r.offered > 0
    assert res.offered == pytest.approx(float(load.total().sum()) * 60)
    assert res.billed_usd == pytest.approx(sum(r.billed_per_hour for r in res.epochs))  # 1-hour epochs


@pytest.fixture(scope="module")
def tiny_report() -> ScenarioReport:
    load = make_load(TINY, ["chain", "other"])
    return run_scenario(load, TEMPLATES, FAST, headrooms=(0.1, 0.3))


def test_tiny_scenario_compares_adaptive_static_and_oracle(tiny_report: ScenarioReport):
    r = tiny_report
    assert [p.headroom for p in r.sweep] == [0.1, 0.3]
    assert r.policy.headroom in (0.1, 0.3)
    assert r.static.scale_changes == 0 and r.static.simulated and r.adaptive.simulated
    assert r.oracle is not None and not r.oracle.simulated
    assert r.oracle.billed_usd <= r.static.billed_usd
    assert r.adaptive.billed_usd < r.static.billed_usd  # a diurnal day is cheaper re-planned
    assert r.saving == pytest.approx(1 - r.adaptive.billed_usd / r.static.billed_usd)
    for s in (r.adaptive, r.static):
        assert 0.0 <= s.slo_attainment <= 1.0
        assert s.within_slo <= s.offered - s.shed + 1e-6
    chosen = next(p for p in r.sweep if p.headroom == r.policy.headroom)
    assert chosen.slo_attainment == pytest.approx(r.adaptive.slo_attainment)
    assert r.target_met == any(p.slo_attainment >= 0.99 for p in r.sweep)
    assert r.simulations > 0 and r.simulation_cache_hits > 0 and r.solve_cache_hits > 0


def test_report_round_trips_through_json(tiny_report: ScenarioReport):
    doc = json.loads(tiny_report.model_dump_json())
    again = ScenarioReport.model_validate(doc)
    assert again.adaptive.billed_usd == tiny_report.adaptive.billed_usd
    assert len(doc["minute_total_rps"]) == 1440


# --------------------------------------------------------------------------- the command


def test_bench_diurnal_json(capsys, tmp_path):
    plots = tmp_path / "plots"  # the working directory: the results page goes to docs/results/ in it
    argv = ["bench", "diurnal", "--apps", "2", "--peak", "60", "--epochs", "24", "--headroom", "0.2",
            "--sample-s", "0.5", "--no-oracle", "--json", "--plots", str(plots)]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["load"]["apps"] == 2 and doc["oracle"] is None
    assert doc["adaptive"]["billed_usd"] > 0 and len(doc["adaptive"]["epochs"]) == 24
    assert sorted(p.name for p in plots.iterdir()) == sorted(
        ["diurnal_rate_cost.png", "diurnal_slo.png", "diurnal_sweep.png"]
    )


def test_bench_diurnal_reads_the_packaged_profiles_unless_told(capsys, tmp_path, monkeypatch):
    """A build cache of locally measured profiles (skinflint demo / models build) must not change the
    benchmark's figures silently: the packaged profiles by default, the cache with --profiles store,
    and the output says which (with each measurement's date and load)."""
    from profiles.store import PACKAGE_ROOT

    data = tmp_path / "cache" / "data"
    data.mkdir(parents=True)
    for model in ("resnet18_face", "resnet18_vehicle", "ssdlite_mnv2"):  # as measured on a busy day
        entries = json.loads((PACKAGE_ROOT / "data" / f"{model}.json").read_text())
        for e in entries:
            e.update(duration_s=e["duration_s"] * 3, date="2099-01-01", host_load_1m=9.5)
        (data / f"{model}.json").write_text(json.dumps(entries))
    monkeypatch.setenv("SKINFLINT_CACHE", str(tmp_path / "cache"))
    argv = ["bench", "diurnal", "--apps", "3", "--peak", "60", "--epochs", "24", "--headroom", "0.2",
            "--sample-s", "0.5", "--no-oracle", "--workers", "1"]  # fmt: skip
    docs = {}
    for source in ("packaged", "store"):
        assert main([*argv, "--profiles", source, "--json"]) == 0
        docs[source] = json.loads(capsys.readouterr().out)
    packaged, store = (docs[k]["host"]["profiles"] for k in ("packaged", "store"))
    assert packaged["profiles"] == "packaged" and store["profiles"] == "store"
    assert packaged["models"]["resnet18_face"]["layer"] == "packaged"
    assert packaged["models"]["resnet18_face"]["date"] != "2099-01-01"
    assert store["models"]["resnet18_face"] == {
        "layer": "build cache", "source": "measured", "date": "2099-01-01", "host_load_1m": 9.5,
    }  # fmt: skip
    assert store["models"]["pose_vgg"]["layer"] == "packaged"  # not in the cache
    # three times the device time on the same or more machines
    assert docs["store"]["static"]["occupancy_usd"] > docs["packaged"]["static"]["occupancy_usd"]
    assert docs["store"]["static"]["billed_usd"] >= docs["packaged"]["static"]["billed_usd"]
    assert main(argv) == 0  # the table says where the profiles came from
    text = capsys.readouterr().out
    assert "Profiles: packaged" in text and "solver dispatchable" in text and "derived" in text


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--epochs", "7"], "divide"),
        (["--headroom", "x"], "--headroom"),
        (["--headroom", "-0.1"], "--headroom"),
        (["--target", "2"], "--target"),
        (["--peak", "0"], "peak"),
        (["--sample-s", "0"], "sample"),
    ],
)
def test_bench_diurnal_bad_input_is_one_line(capsys, args, needle):
    code = main(["bench", "diurnal", *args])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0 and len(lines) == 1 and lines[0].startswith("skinflint: error: ")
    assert needle in lines[0] and "Traceback" not in err
