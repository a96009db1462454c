"""Measured on the instance: which models need it, the bounded sweep, the store update, the label."""

from __future__ import annotations

import pytest

from profiles.errors import StoreError
from profiles.onsite import (
    ONSITE_NOTE,
    InstanceInfo,
    derived_only,
    measure_on_instance,
    onsite_entries,
    profile_source,
    stored_entries,
)
from profiles.store import LocalStore

T4 = InstanceInfo("g4dn.xlarge", "NVIDIA T4", "550.54", "onnxruntime 1.31.1", "CUDAExecutionProvider")


def _entry(hw, batch, duration, source):
    return {"hardware": hw, "batch": batch, "concurrency": 1, "duration_s": duration, "source": source}


class _FakeResult:
    def __init__(self, batches):
        self.batches = batches

    def entries(self, hardware):
        # 1 ms + 0.5 ms per request, as the profiler would report them (its own provenance included)
        return [
            _entry(hardware, b, 0.001 + 0.0005 * b, "measured") | {"runtime": "onnxruntime"}
            for b in self.batches
        ]


@pytest.fixture
def store(tmp_path):
    store = LocalStore(tmp_path)
    store.save_profile("det", [_entry("t4", 1, 0.01, "derived"), _entry("c6i.large", 1, 0.05, "measured")])
    store.save_profile("cls", [_entry("t4", 1, 0.002, "measured")])
    return store


def test_derived_only(store):
    # det: only derived on t4; cls: measured on t4; new: no profile at all
    assert derived_only(store, ["det", "cls", "new"], "t4") == ["det", "new"]


def test_measured_entries_replace_the_derived_ones_on_that_hardware_only(store):
    calls, lines = [], []

    def fake_profile(path, cfg, name, progress):
        calls.append((path, cfg.hardware, cfg.batches, cfg.use_gpu, name))
        progress("b=1")
        return _FakeResult(cfg.batches)

    report = measure_on_instance(
        store, {"det": "det.onnx", "cls": "cls.onnx"}, "t4", (1, 8), T4,
        use_gpu=True, profile=fake_profile, log=lines.append, date="2026-11-26",
    )  # fmt: skip
    assert calls == [("det.onnx", "t4", (1, 8), True, "det")]  # cls was measured already
    assert report.measured == {"det": 2} and not report.skipped
    entries = store.load_profile_dicts("det")
    assert [e["hardware"] for e in entries] == ["c6i.large", "t4", "t4"]  # the CPU entry is kept
    t4 = [e for e in entries if e["hardware"] == "t4"]
    assert [e["duration_s"] for e in t4] == [0.0015, 0.005]  # 1 ms + 0.5 ms * b
    for entry in t4:
        assert entry["source"] == "measured" and entry["note"] == ONSITE_NOTE
        assert (entry["instance_type"], entry["device"], entry["driver"]) == (
            "g4dn.xlarge",
            "NVIDIA T4",
            "550.54",
        )
        assert (entry["provider"], entry["date"]) == ("CUDAExecutionProvider", "2026-11-26")
    assert profile_source(entries, "t4") == ONSITE_NOTE
    assert any("det b=1" in line for line in lines)


def test_time_budget_stops_new_models(tmp_path):
    store = LocalStore(tmp_path)
    ticks = iter([0.0, 0.0, 50.0, 200.0, 200.0])  # start; a at 0 s; b at 50 s; c at 200 s > 120 s; end

    report = measure_on_instance(
        store, {"a": "a.onnx", "b": "b.onnx", "c": "c.onnx"}, "t4", (1,), T4,
        profile=lambda path, cfg, name, progress: _FakeResult(cfg.batches),
        clock=lambda: next(ticks), log=lambda _line: None, date="2026-11-26",
    )  # fmt: skip
    assert report.measured == {"a": 1, "b": 1}
    assert "time budget of 120 s spent" in report.skipped["c"]


def test_a_model_that_fails_keeps_its_derived_entries(store):
    def broken(path, cfg, name, progress):
        raise RuntimeError("CUDA out of memory")

    report = measure_on_instance(
        store, {"det": "det.onnx"}, "t4", (1,), T4, profile=broken, log=lambda _l: None
    )
    assert "CUDA out of memory" in report.skipped["det"]
    assert profile_source(store.load_profile_dicts("det"), "t4") == "derived"


def test_profile_source_labels():
    assert profile_source([_entry("t4", 1, 0.01, "derived")], "t4") == "derived"
    assert profile_source([_entry("t4", 1, 0.01, "measured")], "t4") == "measured"
    assert profile_source([_entry("t4", 1, 0.01, "measured")], "v100") == "none"


def test_with_the_real_profiler_on_this_cpu(tmp_path, tiny_onnx):
    store = LocalStore(tmp_path)
    store.save_profile("tiny", [_entry("c6i.large", 1, 0.5, "derived")])
    cpu = InstanceInfo("c6i.large", "this host's CPU", "-", "onnxruntime", "CPUExecutionProvider")
    report = measure_on_instance(
        store, {"tiny": tiny_onnx}, "c6i.large", (1, 2), cpu, runs=2, log=lambda _l: None
    )
    assert report.measured == {"tiny": 2}
    entries = store.load_profile_dicts("tiny")
    assert [e["batch"] for e in entries] == [1, 2]
    assert all(e["note"] == ONSITE_NOTE and e["duration_s"] < 0.5 for e in entries)
    assert len(store.load_profile("tiny")) == 2  # the planner reads them


def test_the_sweep_takes_each_models_batches_and_serving_settings(store):
    calls = []

    def fake_profile(path, cfg, name, progress, series=None):
        calls.append((name, cfg.batches, series))
        return _FakeResult(cfg.batches)

    measure_on_instance(
        store, {"det": "det.onnx"}, "t4", (1,), T4, per_model_batches={"det": [8, 4, 8]},
        series={"det": [(1, 2)]}, profile=fake_profile, log=lambda _l: None,
    )  # fmt: skip
    assert calls == [("det", (4, 8), [(1, 2)])]


def test_require_onsite_measures_a_class_measured_elsewhere(store):
    # cls has a measured t4 entry, but not one measured on a t4 instance
    assert derived_only(store, ["cls"], "t4") == []
    assert derived_only(store, ["cls"], "t4", require_onsite=True) == ["cls"]


def test_stored_entries_are_empty_for_an_absent_model_and_the_control_loop_reads_them(store, tmp_path):
    lookup = stored_entries(store)
    assert lookup("nothing") == []
    assert [e["hardware"] for e in lookup("det")] == ["t4", "c6i.large"]
    (tmp_path / "data" / "bad.json").write_text("{}")
    with pytest.raises(StoreError):
        lookup("bad")
    assert onsite_entries([_entry("t4", 1, 0.01, "measured") | {"note": ONSITE_NOTE}]) == {
        "t4": [_entry("t4", 1, 0.01, "measured") | {"note": ONSITE_NOTE}]
    }
