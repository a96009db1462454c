"""Per-operator roofline derivation: node costs, spec files, the non-negative fit, leave-one-out."""

import json
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from profiles.onnxgraph import NodeCost, load_onnx, node_costs
from profiles.roofline import (
    OP_CLASSES,
    DeviceSpec,
    ModelWork,
    SpecError,
    derive_points,
    features,
    fit_roofline,
    leave_one_out,
    load_spec,
    nnls,
    within_summary,
)

# 1 TFLOP/s, 1 GB/s: a node's roofline time is max(flops / 1e12, bytes / 1e9) seconds
UNIT = DeviceSpec("unit", 1.0, 1.0, 16, "test-runtime", ())


def _work(name, convs=0, others=0, matmul_weights=0.0, flops=1e9, act=1e6):
    nodes = [NodeCost(f"c{i}", "Conv", "conv", flops, act, 1e3, 1e4) for i in range(convs)]
    nodes += [NodeCost(f"r{i}", "Relu", "other", 0.0, act, 0.0, 1e4) for i in range(others)]
    if matmul_weights:
        nodes.append(NodeCost("fc", "MatMul", "matmul", 2e6, 8e3, matmul_weights, 1e3))
    return ModelWork(name, tuple(nodes), 1e4)


def test_node_costs_of_the_tiny_model(tiny_onnx):
    conv, flat, gemm = node_costs(load_onnx(tiny_onnx))
    # Conv: 2 * 32 outputs * 9 = 576 FLOPs; reads x (16 floats), writes c (32): 48 * 4 bytes; w: 18 floats
    assert (conv.op_class, conv.flops, conv.act_bytes, conv.weight_bytes, conv.outputs) == (
        "conv",
        576,
        48 * 4,
        18 * 4,
        32,
    )
    assert flat.op_class == "shape"
    # Gemm: 2 * 3 * 32 = 192 FLOPs; reads f (32), writes y (3): 35 * 4 bytes; fc: 96 floats
    assert (gemm.op_class, gemm.flops, gemm.act_bytes, gemm.weight_bytes) == ("matmul", 192, 35 * 4, 96 * 4)
    assert not any(node.fused for node in (conv, flat, gemm))


def test_elementwise_chain_is_fused_after_its_first_node(tmp_path):
    w = numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], group=1),
        helper.make_node("Relu", ["c"], ["r"]),  # fed by the conv: its own kernel
        helper.make_node("Sigmoid", ["r"], ["s"]),  # fed by an element-wise node only: fused
        helper.make_node("Mul", ["s", "c"], ["y"]),  # one input from the conv: its own kernel
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 2, 4, 4])],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "chain.onnx"))
    costs = node_costs(load_onnx(tmp_path / "chain.onnx"))
    assert [node.fused for node in costs] == [False, False, True, False]


def test_features_hand_arithmetic():
    work = _work("m", convs=2, others=1)
    row = features(work, 4, UNIT)
    # conv: max(4 * 1e9 / 1e12, (4 * 1e6 + 1e3) / 1e9) = max(4e-3, 4.001e-3) = 4.001e-3 each, two of them
    # relu: (4 * 1e6) / 1e9 = 4e-3; launches: 2 conv + 1 other kernels * 1e-5; input copy 4 * 1e4 / 16e9
    launch, roof = dict(zip(OP_CLASSES, row[2:7], strict=True)), dict(zip(OP_CLASSES, row[7:], strict=True))
    assert row[0] == 1e-3
    assert row[1] == pytest.approx(4 * 1e4 / 16e9)
    assert (launch["conv"], launch["other"], launch["matmul"]) == pytest.approx((2e-5, 1e-5, 0.0))
    assert (roof["conv"], roof["other"]) == pytest.approx((2 * 4.001e-3, 4e-3))


def test_wave_quantisation_pads_the_outputs_of_a_convolution():
    spec = DeviceSpec("unit", 1.0, 1e6, 16, "test-runtime", (), sm_count=10, tile_outputs=100)
    work = ModelWork("c", (NodeCost("c", "Conv", "conv", 2e6, 0.0, 0.0, 10.0),), 0.0)
    # reduction length 2e6 / (2 * 10) = 1e5; batch 3: 30 outputs pad to one wave of 10 * 100 = 1000
    assert features(work, 3, spec)[7] == pytest.approx(2e6 / 10 * 1000 / 1e12)  # k_conv's column


def test_nnls_recovers_non_negative_coefficients_and_clips_negative_ones():
    rng = np.random.default_rng(0)
    a = rng.random((20, 3))
    assert nnls(a, a @ np.array([1.0, 0.0, 2.0])) == pytest.approx([1.0, 0.0, 2.0], abs=1e-9)
    x = nnls(a, a @ np.array([1.0, -1.0, 2.0]))
    assert (x >= 0).all() and x[1] == 0.0


def test_fit_recovers_a_shared_model_and_predicts_a_held_out_one():
    # truth: fixed 0.1 ms, 20 us per kernel, every class at half its roofline (k = 2), no input copy
    def truth(work, batch):
        row = features(work, batch, UNIT)
        return 0.1 * row[0] + 2.0 * row[2:7].sum() + 2.0 * row[7:].sum()

    models = [_work("a", convs=3), _work("b", convs=1, others=4), _work("c", convs=6, others=2, flops=3e8)]
    measured = {w.name: {b: truth(w, b) for b in (1, 8, 32)} for w in models}
    works = {w.name: w for w in models}
    fit = fit_roofline(UNIT, [(works[m], b, d) for m, pts in measured.items() for b, d in pts.items()])
    assert fit.fixed_s == pytest.approx(1e-4, rel=1e-6)
    assert fit.max_rel_err < 1e-9
    loo = leave_one_out(UNIT, measured, works)
    ratios = [derived / meas for pts in loo.values() for derived, meas in pts.values()]
    assert within_summary(ratios)["within"] == 1.0
    assert min(ratios) == pytest.approx(1.0, abs=1e-6)


def test_fixed_cost_does_not_scale_with_weight_bytes():
    # the wide-MLP failure of the old method: 100 MB of weights must cost reading them once, not a
    # multiple of the anchor's fixed cost. H100: 100e6 B / 3350 GB/s = 0.03 ms at full bandwidth.
    h100 = DeviceSpec("h100", 67.0, 3350, 80, "test-runtime", ())

    def truth(work, batch):
        row = features(work, batch, h100)
        return 0.1 * row[0] + 2.0 * row[2:7].sum() + 2.0 * row[7:].sum()

    anchors = [_work("a", convs=30), _work("b", convs=10, others=40), _work("c", convs=60, flops=3e8)]
    fit = fit_roofline(h100, [(w, b, truth(w, b)) for w in anchors for b in (1, 8, 32)])
    small, wide = _work("mlp", matmul_weights=1e3), _work("mlp", matmul_weights=100e6)
    extra = fit.predict(wide, 1) - fit.predict(small, 1)
    assert extra == pytest.approx(2.0 * (100e6 - 1e3) / 3350e9, rel=1e-3)  # 0.06 ms at k = 2


def test_overlapping_runtime_takes_the_larger_of_launches_and_work():
    spec = DeviceSpec("unit", 1.0, 1.0, 16, "torch-eager", (), overlap=True)
    work = _work("m", convs=2)
    fit = fit_roofline(spec, [(work, 1, 1.0)])
    row = features(work, 1, spec)
    coef = np.array(fit.coef)
    launch, roof = row[2:7] @ coef[2:7], row[7:] @ coef[7:]  # columns: fixed, h2d, 5 launches, 5 k
    assert fit.predict(work, 1) == pytest.approx(row[0] * coef[0] + row[1] * coef[1] + max(launch, roof))


def _spec_file(tmp_path, **changes):
    raw = {
        "hardware": "h100",
        "peak_fp32_tflops": 67.0,
        "memory_bandwidth_gbps": 3350,
        "gpu_memory_gib": 80,
        "runtime": "torch-eager-fp32",
        "anchors": [{"model": "models/r50.onnx", "batch": 1, "duration_s": 0.00309}],
    } | changes
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(raw))
    return path


def test_load_spec_resolves_anchor_paths_next_to_the_file(tmp_path):
    spec = load_spec(_spec_file(tmp_path))
    assert spec.model_path(spec.anchors[0]) == (tmp_path / "models" / "r50.onnx").resolve()
    assert spec.overlap  # an eager runtime launches from the host while the GPU works
    assert not load_spec(_spec_file(tmp_path, runtime="torch-cudagraph-fp32")).overlap


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"anchors": []}, "no anchors"),
        ({"anchors": [{"model": "a.onnx", "batch": 0, "duration_s": 1.0}]}, "'batch' must be a positive"),
        ({"anchors": [{"model": "a.onnx", "batch": 1, "duration_s": -1}]}, "'duration_s' must be"),
        ({"peak_fp32_tflops": "fast"}, "'peak_fp32_tflops' must be a positive number"),
        ({"runtime": ""}, "'runtime' must be a non-empty string"),
    ],
)
def test_bad_spec_is_one_line(tmp_path, changes, message):
    with pytest.raises(SpecError, match=message) as exc:
        load_spec(_spec_file(tmp_path, **changes))
    assert "\n" not in str(exc.value)


def test_unreadable_spec(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SpecError, match="not JSON"):
        load_spec(tmp_path / "bad.json")


def test_derive_points_leave_out_batches_over_memory():
    spec = DeviceSpec("small", 1.0, 1.0, 1, "test-runtime", ())  # 1 GiB
    work = _work("m", convs=1, act=0.1 * 2**30)  # 2 * b * 0.1 GiB must stay under 0.8 GiB: b <= 3
    fit = fit_roofline(spec, [(work, 1, 0.5)])
    points = derive_points(fit, work, (1, 2, 4, 8))
    assert [p["batch"] for p in points] == [1, 2]
    assert {p["source"] for p in points} == {"derived"}
    assert "roofline" in points[0]["method"]
    with pytest.raises(SpecError, match="positive"):
        derive_points(fit, work, (0,))


def test_within_summary_hand_arithmetic():
    # 0.5 and 2.0 fall outside [0.7, 1.45]; 1.0 and 0.7 inside: 2 of 4; geometric mean of
    # (0.5, 0.7, 1.0, 2.0) = (0.7) ** 0.25
    summary = within_summary([0.5, 0.7, 1.0, 2.0])
    assert summary["within"] == 0.5
    assert summary["min"] == 0.5
    assert summary["geomean"] == pytest.approx(0.7**0.25)
    assert math.isnan(within_summary([])["min"])
