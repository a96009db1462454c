"""ONNX model inspection: load with clean errors, find the batch dimension, count FLOPs and bytes.

Also the one place that exports a torch ``nn.Module`` to ONNX with a dynamic batch axis (TorchScript
exporter, ``dynamo=False``: it works offline and keeps the exported bytes deterministic).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from profiles.errors import InputShapeError, NoBatchDimError, NotOnnxError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import onnx
    from torch import nn

__all__ = [
    "ELEMENTWISE_OPS",
    "SHAPE_OPS",
    "GraphCost",
    "InputSpec",
    "NodeCost",
    "export_torch",
    "graph_cost",
    "input_specs",
    "load_onnx",
    "node_costs",
]

#: Element-wise operators: a chain of them fed only by one another fuses into one kernel (see NodeCost).
ELEMENTWISE_OPS = frozenset(
    {"Add", "Sub", "Mul", "Div", "Relu", "Clip", "Sigmoid", "Tanh", "Split", "Exp", "Neg", "Sqrt", "Pow",
     "LeakyRelu", "HardSigmoid", "HardSwish", "Erf", "Where", "Cast", "Min", "Max", "Abs", "Softplus", "Gelu"}
)  # fmt: skip
#: Operators that only move metadata (shapes, views, constants): no kernel is launched for them.
SHAPE_OPS = frozenset(
    {"Constant", "ConstantOfShape", "Shape", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Size"}
)

_NUMPY_DTYPES = {1: "float32", 10: "float16", 11: "float64", 6: "int32", 7: "int64", 9: "bool", 2: "uint8"}


@dataclass(frozen=True)
class InputSpec:
    """One model input: name, numpy dtype and the shape of one request (batch dimension removed)."""

    name: str
    dtype: str
    shape: tuple[int, ...]


def load_onnx(path: str | Path) -> onnx.ModelProto:
    """Load and check an ONNX file; :class:`NotOnnxError` (one line) for anything else."""
    import onnx  # optional heavy dependency: onnx

    model_path = Path(path)
    if not model_path.is_file():
        raise NotOnnxError(f"{model_path}: no such file", str(model_path))
    try:
        model = onnx.load(str(model_path), load_external_data=False)
        onnx.checker.check_model(model)
    except Exception as exc:  # protobuf DecodeError, ValidationError, ...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NotOnnxError(f"{model_path}: not a valid ONNX model ({first[:120]})", str(model_path)) from exc
    if not model.graph.node:
        raise NotOnnxError(f"{model_path}: ONNX graph has no nodes", str(model_path))
    return model


def _graph_inputs(model: onnx.ModelProto) -> list[Any]:
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def input_specs(
    model: onnx.ModelProto, overrides: Mapping[str, Sequence[int]] | None = None
) -> list[InputSpec]:
    """Inputs with their per-request shapes. The leading dimension of every input must be dynamic
    (a ``dim_param`` or unset): that is the batch. ``overrides`` give per-request shapes for inputs
    whose other dimensions are symbolic."""
    overrides = dict(overrides or {})
    out: list[InputSpec] = []
    for inp in _graph_inputs(model):
        ttype = inp.type.tensor_type
        dims = list(ttype.shape.dim) if ttype.HasField("shape") else []
        shown = tuple(dim.dim_param or (dim.dim_value if dim.HasField("dim_value") else "?") for dim in dims)
        if not dims:
            raise NoBatchDimError(
                f"input {inp.name!r} has no batch dimension (rank 0 or unknown rank): "
                "export the model with a dynamic leading batch axis",
                inp.name,
                shown,
            )
        if dims[0].HasField("dim_value"):
            raise NoBatchDimError(
                f"input {inp.name!r} has fixed shape {list(shown)}: export the model with a dynamic "
                "batch axis (torch.onnx.export(..., dynamic_axes={name: {0: 'batch'}}))",
                inp.name,
                shown,
            )
        dtype = _NUMPY_DTYPES.get(ttype.elem_type)
        if dtype is None:
            raise InputShapeError(
                f"input {inp.name!r} has unsupported element type {ttype.elem_type}", inp.name
            )
        if inp.name in overrides:
            shape = tuple(int(size) for size in overrides.pop(inp.name))
        else:
            rest = dims[1:]
            if any(not dim.HasField("dim_value") or dim.dim_value <= 0 for dim in rest):
                raise InputShapeError(
                    f"cannot infer the shape of input {inp.name!r} {list(shown)}: "
                    f"pass --input-shape {inp.name}=D1xD2x... for one request",
                    inp.name,
                )
            shape = tuple(int(dim.dim_value) for dim in rest)
        out.append(InputSpec(inp.name, dtype, shape))
    if overrides:
        raise InputShapeError(f"--input-shape names unknown input(s): {', '.join(sorted(overrides))}")
    if not out:
        raise NoBatchDimError("model has no inputs to batch")
    return out


@dataclass(frozen=True)
class GraphCost:
    """Per-request cost of a model, counted on the ONNX graph at batch 1.

    ``flops``: multiply-adds counted as 2 FLOPs (Conv, ConvTranspose, Gemm, MatMul, LSTM/GRU);
    ``weight_bytes``: bytes of all initializers (read once per batch);
    ``activation_bytes``: bytes of every intermediate tensor (written once per request);
    ``nodes``: operator count (a proxy for kernel launches)."""

    flops: float
    weight_bytes: float
    activation_bytes: float
    nodes: int
    params: int

    def as_dict(self) -> dict[str, float]:
        return {
            "flops": self.flops,
            "weight_bytes": self.weight_bytes,
            "activation_bytes": self.activation_bytes,
            "nodes": self.nodes,
            "params": self.params,
        }


def _shape_map(model: onnx.ModelProto, specs: Sequence[InputSpec]) -> dict[str, tuple[int, ...]]:
    import onnx  # optional heavy dependency: onnx
    from onnx import shape_inference  # optional heavy dependency: onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    by_name = {spec.name: spec for spec in specs}
    for inp in probe.graph.input:
        if inp.name in by_name:
            dims = inp.type.tensor_type.shape.dim
            full = (1, *by_name[inp.name].shape)
            del dims[:]
            for value_info in full:
                dims.add().dim_value = value_info
    inferred = shape_inference.infer_shapes(probe, data_prop=True)
    shapes: dict[str, tuple[int, ...]] = {}
    for vi in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        tensor = vi.type.tensor_type
        if tensor.HasField("shape") and all(dim.HasField("dim_value") for dim in tensor.shape.dim):
            shapes[vi.name] = tuple(int(dim.dim_value) for dim in tensor.shape.dim)
    for init in probe.graph.initializer:
        shapes[init.name] = tuple(int(dim) for dim in init.dims)
    return shapes


def _node_flops(node: Any, shapes: Mapping[str, tuple[int, ...]]) -> float:  # noqa: PLR0911
    def shp(i: int, outs: bool = False) -> tuple[int, ...] | None:
        names = node.output if outs else node.input
        return shapes.get(names[i]) if len(names) > i and names[i] else None

    op = node.op_type
    if op in ("Conv", "ConvTranspose"):
        w, y, x = shp(1), shp(0, outs=True), shp(0)
        if w is None or y is None or x is None:
            return 0.0
        if op == "Conv":  # each output element: Cin/g * prod(kernel) MACs
            return 2.0 * math.prod(y) * math.prod(w[1:])
        return 2.0 * math.prod(x) * math.prod(w[1:])  # transposed: each input element scatters Cout/g*k
    if op in ("Gemm", "MatMul"):
        a, y = shp(0), shp(0, outs=True)
        if a is None or y is None:
            return 0.0
        return 2.0 * math.prod(y) * a[-1]
    if op in ("LSTM", "GRU", "RNN"):
        x, w, r = shp(0), shp(1), shp(2)
        if x is None or w is None or r is None:
            return 0.0
        seq, batch = x[0], x[1]
        return 2.0 * seq * batch * w[0] * w[1] * (w[2] + r[2])
    return 0.0


def graph_cost(model: onnx.ModelProto, specs: Sequence[InputSpec] | None = None) -> GraphCost:
    """Count FLOPs and bytes of one request (see :class:`GraphCost`)."""
    from onnx import helper  # optional heavy dependency: onnx

    specs = list(specs) if specs is not None else input_specs(model)
    shapes = _shape_map(model, specs)
    flops = 0.0
    act = 0.0
    for node in model.graph.node:
        flops += _node_flops(node, shapes)
        for output in node.output:
            if output in shapes:
                act += 4.0 * math.prod(shapes[output])
    weight_bytes = 0.0
    params = 0
    for init in model.graph.initializer:
        elements = math.prod(init.dims) if init.dims else 1
        params += elements
        weight_bytes += elements * np.dtype(helper.tensor_dtype_to_np_dtype(init.data_type)).itemsize
    return GraphCost(flops, weight_bytes, act, len(model.graph.node), params)


@dataclass(frozen=True)
class NodeCost:
    """The work of one ONNX node for one request (batch 1), for a per-operator roofline.

    ``op_class``: ``conv`` (dense convolution), ``dwconv`` (grouped/depthwise), ``matmul`` (Gemm,
    MatMul), ``rnn`` (LSTM, GRU, RNN), ``shape`` (metadata only, no kernel) or ``other`` (element-wise,
    pooling, normalisation, concatenation...: memory-bound); ``flops`` as in :class:`GraphCost`;
    ``act_bytes``: activation bytes read and written (scale with the batch); ``weight_bytes``: bytes of
    the initializers it reads (once per batch); ``outputs``: elements of its first output (one request;
    ``flops / (2 * outputs)`` is the reduction length of a Conv or MatMul); ``fused``: an element-wise
    node all of whose activation inputs come from other element-wise nodes (or constants), so a runtime
    that fuses element-wise chains (torch's fused LSTM cell, ORT and TensorRT fusions) launches no
    kernel of its own for it."""

    name: str
    op_type: str
    op_class: str
    flops: float
    act_bytes: float
    weight_bytes: float
    outputs: float = 0.0
    fused: bool = False


def _op_class(node: Any) -> str:
    op = node.op_type
    if op in SHAPE_OPS:
        return "shape"
    if op in ("Conv", "ConvTranspose"):
        group = next((attr.i for attr in node.attribute if attr.name == "group"), 1)
        return "dwconv" if group > 1 else "conv"
    if op in ("Gemm", "MatMul"):
        return "matmul"
    if op in ("LSTM", "GRU", "RNN"):
        return "rnn"
    return "other"


def node_costs(model: onnx.ModelProto, specs: Sequence[InputSpec] | None = None) -> list[NodeCost]:
    """Per-node FLOPs and bytes of one request, in graph order (see :class:`NodeCost`)."""
    from onnx import helper  # optional heavy dependency: onnx

    specs = list(specs) if specs is not None else input_specs(model)
    shapes = _shape_map(model, specs)
    inits = {
        init.name: (math.prod(init.dims) if init.dims else 1)
        * np.dtype(helper.tensor_dtype_to_np_dtype(init.data_type)).itemsize
        for init in model.graph.initializer
    }
    producer = {name: node.op_type for node in model.graph.node for name in node.output}
    out: list[NodeCost] = []
    for node in model.graph.node:
        feeders = [producer.get(name, "") for name in node.input if name and name not in inits]
        feeders = [op for op in feeders if op not in SHAPE_OPS]
        fused = (
            node.op_type in ELEMENTWISE_OPS and bool(feeders) and all(op in ELEMENTWISE_OPS for op in feeders)
        )
        weights = sum(inits[name] for name in node.input if name in inits)
        act = sum(
            4.0 * math.prod(shapes[name])
            for name in [*node.input, *node.output]
            if name and name not in inits and name in shapes
        )
        first = shapes.get(node.output[0]) if node.output and node.output[0] else None
        outputs = float(math.prod(first)) if first is not None else 0.0
        out.append(
            NodeCost(
                node.name,
                node.op_type,
                _op_class(node),
                _node_flops(node, shapes),
                act,
                float(weights),
                outputs,
                fused,
            )
        )
    return out


def export_torch(
    module: nn.Module,
    input_shape: Sequence[int],
    path: str | Path,
    *,
    input_name: str = "input",
    output_names: Sequence[str] = ("output",),
    opset: int = 17,
) -> Path:
    """Export ``module`` (eval mode) to ONNX with a dynamic batch axis on the input and outputs."""
    import torch  # optional heavy dependency: torch

    out_path = Path(path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    dummy = torch.zeros(2, *input_shape)
    axes = {input_name: {0: "batch"}} | {output: {0: "batch"} for output in output_names}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(),
            (dummy,),
            str(out_path),
            input_names=[input_name],
            output_names=list(output_names),
            dynamic_axes=axes,
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )
    return out_path
