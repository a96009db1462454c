"""Derived profiles: GPU anchors scaled by FLOPs/bytes, CPU sizes from HiTDL, leave-one-out check."""

import pytest

from planner.models import ProfileEntry
from profiles.derive import (
    ANCHORS,
    RESNET50_COST,
    cpu_size_entries,
    derive_gpu_entries,
    gpu_linear_model,
    leave_one_out,
)
from profiles.hardware import load_catalog


def test_anchor_linear_models():
    # V100: alpha = (29.4 - 10.4) / 31 = 0.6129 ms, beta = 10.4 - 0.6129 = 9.787 ms
    assert ANCHORS["v100"].alpha_s == pytest.approx(0.019 / 31)
    assert ANCHORS["v100"].beta_s == pytest.approx(0.0104 - 0.019 / 31)
    # T4: alpha = (77.6 - 10.7) / 31 = 2.158 ms
    assert ANCHORS["t4"].alpha_s == pytest.approx(0.0669 / 31)
    # P100 is slower per image than V100 (peak FP32 9.3 vs 15.7 TFLOPS)
    assert ANCHORS["p100"].alpha_s == pytest.approx(ANCHORS["v100"].alpha_s * 15.7 / 9.3)


def test_resnet50_reproduces_its_anchor():
    cat = load_catalog()
    for hw in ("v100", "t4", "p100"):
        alpha, beta = gpu_linear_model(RESNET50_COST, hw, cat[hw])
        assert alpha + beta == pytest.approx(ANCHORS[hw].d1_s)
        assert 32 * alpha + beta == pytest.approx(ANCHORS[hw].d32_s)


def test_derived_gpu_entries_are_marked_and_scale_with_flops():
    cat = load_catalog()
    half = {k: v / 2 for k, v in RESNET50_COST.items()}  # half the FLOPs, bytes and operators
    entries = derive_gpu_entries("half", half, cat, batches=(1, 32), date="2024-01-01")
    assert {e["hardware"] for e in entries} == {"p100", "v100", "t4"}
    for e in entries:
        ProfileEntry.model_validate(e)
        assert e["source"] == "derived" and e["model"] == "half"
    v = {e["batch"]: e["duration_s"] for e in entries if e["hardware"] == "v100"}
    # every term halves: d(32) = 29.4 / 2 = 14.7 ms
    assert v[32] == pytest.approx(0.0147, rel=1e-4)
    assert v[1] == pytest.approx(0.0052, rel=1e-4)


def test_derived_gpu_entries_stop_at_gpu_memory():
    cat = load_catalog()
    huge = dict(RESNET50_COST, activation_bytes=1e9)  # 1 GB per request: 2*b GB must fit in 0.8*16 GiB
    batches = {e["batch"] for e in derive_gpu_entries("huge", huge, cat, batches=(1, 2, 4, 8, 16))}
    assert batches == {1, 2, 4}


def test_cpu_sizes_measured_and_derived():
    cat = {n: s for n, s in load_catalog().items() if (s.model_extra or {})["kind"] == "cpu"}
    # batch 1: 10 ms on 1 thread, 6 ms on 2 -> L(n) = 2 + 8/n; two 1-thread sessions take 12 ms each
    entries, fits = cpu_size_entries(
        "m", t1={1: 0.010}, t2={1: 0.006}, concurrent_t1={1: 0.012}, catalog=cat, provenance={"host_cpu": "X"}
    )
    by = {(e["hardware"], e["concurrency"]): e for e in entries}
    assert by[("c6i.large", 1)]["source"] == "measured" and by[("c6i.large", 1)]["duration_s"] == 0.006
    assert by[("c6i.large", 2)]["duration_s"] == 0.012
    # xlarge (4 vCPU): c=1 -> L(4) = 2 + 2 = 4 ms; c=2 -> L(2) * 1.2 interference = 7.2 ms
    assert by[("c6i.xlarge", 1)]["duration_s"] == pytest.approx(0.004)
    assert by[("c6i.xlarge", 2)]["duration_s"] == pytest.approx(0.0072)
    # 2xlarge (8 vCPU): c=1 -> L(8) = 2 + 1 = 3 ms
    assert by[("c6i.2xlarge", 1)]["duration_s"] == pytest.approx(0.003)
    assert by[("c6i.2xlarge", 1)]["source"] == "derived"
    assert "hitdl" in by[("c6i.2xlarge", 1)]["method"]
    assert fits[1]["degenerate"] is True


def test_leave_one_out_is_exact_when_cost_is_proportional():
    # Three models whose CPU time is exactly 1 ns per FLOP per request plus nothing fixed.
    costs = {
        m: {"flops": f, "activation_bytes": 0.0, "weight_bytes": 1.0, "nodes": 1}
        for m, f in (("a", 1e6), ("b", 2e6), ("c", 5e6))
    }
    measured = {m: {b: 1e-9 * c["flops"] * b for b in (1, 4, 16)} for m, c in costs.items()}
    errors = leave_one_out(measured, costs, ridge=0.0)
    assert errors == {
        "a": pytest.approx(0, abs=1e-9),
        "b": pytest.approx(0, abs=1e-9),
        "c": pytest.approx(0, abs=1e-9),
    }


def test_leave_one_out_reports_misprediction():
    costs = {
        "a": {"flops": 1e6, "activation_bytes": 0.0, "weight_bytes": 1.0, "nodes": 1},
        "b": {"flops": 1e6, "activation_bytes": 0.0, "weight_bytes": 1.0, "nodes": 1},
    }
    # same FLOPs, b is twice as slow: predicting b from a is 50% low, a from b 100% high
    measured = {"a": {1: 0.001}, "b": {1: 0.002}}
    errors = leave_one_out(measured, costs, ridge=0.0)
    assert errors["b"] == pytest.approx(0.5)
    assert errors["a"] == pytest.approx(1.0)


@pytest.mark.slow
def test_resnet50_cost_constants_match_the_graph(tmp_path):
    from profiles.demo.nets import ResNet50
    from profiles.onnxgraph import export_torch, graph_cost, load_onnx

    cost = graph_cost(load_onnx(export_torch(ResNet50().eval(), (3, 224, 224), tmp_path / "r50.onnx")))
    assert cost.flops == pytest.approx(RESNET50_COST["flops"], rel=1e-3)
    assert cost.weight_bytes == pytest.approx(RESNET50_COST["weight_bytes"], rel=1e-3)
    assert cost.activation_bytes == pytest.approx(RESNET50_COST["activation_bytes"], rel=1e-3)
    assert cost.nodes == RESNET50_COST["nodes"]
