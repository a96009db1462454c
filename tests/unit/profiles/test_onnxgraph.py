"""ONNX inspection: batch dimension, input shapes, FLOPs and bytes."""

import pytest

from profiles.errors import InputShapeError, NoBatchDimError, NotOnnxError
from profiles.onnxgraph import graph_cost, input_specs, load_onnx


def test_tiny_model_inputs_and_cost(tiny_onnx):
    model = load_onnx(tiny_onnx)
    (spec,) = input_specs(model)
    assert (spec.name, spec.dtype, spec.shape) == ("x", "float32", (1, 4, 4))
    cost = graph_cost(model)
    # Conv: 2 * (2*4*4 outputs) * (1*3*3) = 576; Gemm: 2 * 3 outputs * 32 inputs = 192
    assert cost.flops == 576 + 192
    # weights: (2*1*3*3 + 3*32) floats = 114 * 4 bytes
    assert cost.weight_bytes == 114 * 4
    assert cost.params == 114
    # activations: conv out 32 + flatten 32 + gemm out 3 floats
    assert cost.activation_bytes == (32 + 32 + 3) * 4
    assert cost.nodes == 3


def test_not_onnx(not_onnx, tmp_path):
    with pytest.raises(NotOnnxError, match="not a valid ONNX model"):
        load_onnx(not_onnx)
    with pytest.raises(NotOnnxError, match="no such file"):
        load_onnx(tmp_path / "missing.onnx")


def test_fixed_batch_dimension_is_refused(fixed_batch_onnx):
    with pytest.raises(NoBatchDimError, match="fixed shape \\[1, 1, 4, 4\\]"):
        input_specs(load_onnx(fixed_batch_onnx))


def test_symbolic_shape_needs_override(symbolic_onnx):
    model = load_onnx(symbolic_onnx)
    with pytest.raises(InputShapeError, match="--input-shape x="):
        input_specs(model)
    (spec,) = input_specs(model, {"x": (3, 8, 8)})
    assert spec.shape == (3, 8, 8)
    with pytest.raises(InputShapeError, match="unknown input"):
        input_specs(model, {"x": (3, 8, 8), "nope": (1,)})
