"""The real runtime warms up before its share is ready: its first request batch runs at speed."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from workers.runtimes import OnnxRuntime


@pytest.fixture(scope="module")
def gray_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """x (B, 1, 4, 4) -> Conv -> Flatten -> Gemm to 3 classes (random fixed-seed weights)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((2, 1, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((3, 32)).astype(np.float32), "fc")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Flatten", ["c"], ["f"], axis=1),
            helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1),
        ],
        "gray",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        initializer=[w, fc],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("onnx") / "gray.onnx"
    onnx.save(model, str(path))
    return str(path)


class _Counting:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.batches: list[int] = []

    def run(self, names: Any, feeds: dict[str, np.ndarray]) -> Any:
        self.batches.append(next(iter(feeds.values())).shape[0])
        return self.session.run(names, feeds)


def test_warm_up_runs_the_model_at_the_planned_batch_on_a_decoded_frame(gray_model: str) -> None:
    rt = OnnxRuntime(gray_model)
    counting = _Counting(rt.session)
    rt.session = counting  # type: ignore[assignment]
    took = rt.warm_up(batch=4, runs=2)
    assert counting.batches == [4, 4] and took > 0
    out = rt.run([np.zeros((1, 4, 4), dtype=np.float32)])
    assert out[0]["label"] in (0, 1, 2) and out[0]["provider"] == "CPUExecutionProvider"


def _png(width: int, height: int) -> bytes:
    from io import BytesIO

    from PIL import Image

    out = BytesIO()
    Image.new("RGB", (width, height), (9, 9, 9)).save(out, "PNG")
    return out.getvalue()


def test_a_frame_over_the_workers_pixel_cap_is_refused_before_it_is_decoded(monkeypatch) -> None:
    from PIL import Image

    from workers.runtimes import decode_frame

    decoded: list[str] = []
    real_convert = Image.Image.convert
    monkeypatch.setattr(
        Image.Image, "convert", lambda self, *a, **k: decoded.append("x") or real_convert(self, *a, **k)
    )
    assert decode_frame(_png(40, 30), None, (4, 4), max_pixels=1200).shape == (4, 4, 3)
    with pytest.raises(ValueError, match="41x30 pixels is over the worker's cap of 1,200 pixels"):
        decode_frame(_png(41, 30), None, (4, 4), max_pixels=1200)
    assert decoded == ["x"]  # the refused frame was never decoded
    # the cap comes from the environment by default (the front's cap unless set)
    monkeypatch.setenv("SKINFLINT_WORKER_MAX_PIXELS", "100")
    with pytest.raises(ValueError, match="cap of 100 pixels"):
        decode_frame(_png(11, 10), None, (4, 4))
    monkeypatch.setenv("SKINFLINT_WORKER_MAX_PIXELS", "lots")
    with pytest.raises(ValueError, match="SKINFLINT_WORKER_MAX_PIXELS must be a whole number"):
        decode_frame(_png(11, 10), None, (4, 4))


def test_prepare_from_the_workers_decode_equals_prepare_from_the_bytes(gray_model: str) -> None:
    # the worker decodes a parent's frame once, for its model and its children's crops (workers/crops.py)
    from workers.crops import open_frame

    rt = OnnxRuntime(gray_model)
    rng = np.random.default_rng(1)
    from io import BytesIO

    from PIL import Image

    buf = BytesIO()
    Image.fromarray(rng.integers(0, 255, (30, 40, 3), dtype=np.uint8)).save(buf, "PNG")
    data = buf.getvalue()
    for region in (None, [0.1, 0.2, 0.5, 0.6]):
        assert np.array_equal(rt.prepare_frame(open_frame(data).image, region), rt.prepare(data, region))


@pytest.mark.parametrize("side", [10_000, 20_000])  # under and over Pillow's own cap (179 MP)
def test_a_decompression_bomb_is_refused_from_its_header_by_both_decode_paths(side: int) -> None:
    from bench.abuse import png_bomb
    from workers.crops import open_frame
    from workers.runtimes import decode_frame

    bomb = png_bomb(side, side, rows=16)  # a few KB on the wire
    with pytest.raises(ValueError, match="over the worker's cap"):
        decode_frame(bomb, None, (4, 4))
    with pytest.raises(ValueError, match="over the worker's cap"):
        open_frame(bomb)
