"""Small ONNX models built in the test session (no demo models, no download)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def _conv_gemm_model(batch_dim: str | int) -> onnx.ModelProto:
    """x (B, 1, 4, 4) -> Conv 2 filters 3x3 pad 1 -> Flatten -> Gemm to 3 outputs.

    FLOPs per request: Conv 2*(2*4*4)*(1*3*3) = 576; Gemm 2*3*32 = 192; total 768."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((2, 1, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((3, 32)).astype(np.float32), "fc")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Flatten", ["c"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch_dim, 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch_dim, 3])],
        initializer=[w, fc],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    onnx.save(_conv_gemm_model("batch"), str(path))
    return path


@pytest.fixture(scope="session")
def fixed_batch_onnx(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("onnx") / "fixed.onnx"
    onnx.save(_conv_gemm_model(1), str(path))
    return path


@pytest.fixture(scope="session")
def symbolic_onnx(tmp_path_factory: pytest.TempPathFactory):
    """Input (batch, C, H, W) with every dimension symbolic: the per-request shape cannot be inferred."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "sym",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "c", "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "c", "h", "w"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("onnx") / "sym.onnx"
    onnx.save(model, str(path))
    return path


@pytest.fixture
def not_onnx(tmp_path):
    path = tmp_path / "notes.onnx"
    path.write_text("this is not a protobuf\n")
    return path
