"""bench/gpu_derive.py: reading the shared H100 figures and the CPU profiles, the plot."""

from __future__ import annotations

import json

import pytest

from bench.gpu_derive import (
    BATCHES,
    CHECK_DATA,
    DEMO,
    H100_DATA,
    check_measured,
    cpu_measured,
    h100_measured,
    held_out_recorded,
    plot,
)
from profiles.store import PACKAGE_ROOT


def test_h100_figures_as_measured_points():
    data = json.loads(H100_DATA.read_text())
    eager = h100_measured(data, "eager")
    assert set(eager) == {*DEMO, "resnet50"}
    assert all(set(points) == set(BATCHES) for points in eager.values())
    # eager = run1, fp32 (TF32 off), the input copy in the timed call
    assert eager["resnet50"][1] == data["run1"]["models"]["resnet50"]["fp32_b1"]["with_h2d"]["median_s"]
    graph = h100_measured(data, "graph")
    assert set(graph) == {"resnet50", "ssdlite_mnv2", "resnet18_vehicle", "action_r21d", "caption_decoder"}
    assert graph["ssdlite_mnv2"][1] == pytest.approx(0.000638, rel=1e-3)  # 0.64 ms against 4.4 ms eager


def test_cpu_profiles_as_measured_points():
    measured = cpu_measured(PACKAGE_ROOT / "data")
    assert set(measured) == set(DEMO)
    entries = json.loads((PACKAGE_ROOT / "data" / "landmark_net.json").read_text())
    (b1,) = [
        e
        for e in entries
        if e["hardware"] == "c6i.large" and e["concurrency"] == 1 and e["threads"] == 2 and e["batch"] == 1
    ]
    assert measured["landmark_net"][1] == b1["duration_s"]


def test_plot_writes_a_png(tmp_path):
    results = {"H100 eager": {"m": {1: (1e-3, 1.2e-3), 8: (2e-3, 1.9e-3)}}, "CPU": {"m": {1: (5e-3, 4e-3)}}}
    plot(results, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_gpu_check_record_as_measured_points_and_held_out(capsys):
    data = json.loads(CHECK_DATA.read_text())
    for runtime in ("torch-eager-fp32", "torch-cudagraph-fp32"):
        measured = check_measured(data, runtime)
        assert set(measured) == {*DEMO, "resnet50"}
        assert all(set(points) == set(BATCHES) for points in measured.values())
    assert check_measured(data, "torch-cudagraph-fp32")["resnet50"][32] == pytest.approx(0.01176, rel=1e-3)
    summaries = held_out_recorded(data)
    assert set(summaries) == {"torch-eager-fp32", "torch-cudagraph-fp32"}
    assert summaries["torch-cudagraph-fp32"]["points"] == 21
    assert "vit_tiny_patch16_224" in capsys.readouterr().out
