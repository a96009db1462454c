"""Demo models: deterministic, real shapes, exported ONNX with a dynamic batch matches torch; tracker."""

import hashlib

import numpy as np
import onnxruntime as ort
import pytest
import torch

from profiles.demo.nets import MODEL_SPECS, build_model
from profiles.demo.tracker import IouTracker, iou_matrix, synthetic_detections
from profiles.onnxgraph import export_torch, input_specs, load_onnx

OUT_SHAPES = {
    "ssdlite_mnv2": [(2, 804, 4), (2, 804, 21)],
    "resnet18_vehicle": [(2, 12)],
    "resnet18_face": [(2, 8)],
    "landmark_net": [(2, 68, 24, 24)],
    "pose_vgg": [(2, 57, 16, 12)],
    "caption_encoder": [(2, 256)],
    "caption_decoder": [(2, 12)],
    "action_r21d": [(2, 20)],
}


@pytest.mark.parametrize("name", list(MODEL_SPECS))
def test_models_build_deterministically_with_real_shapes(name):
    spec = MODEL_SPECS[name]
    a, b = build_model(name), build_model(name)
    x = torch.randn(2, *spec.input_shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ya, yb = a(x), b(x)
    ya = ya if isinstance(ya, tuple) else (ya,)
    yb = yb if isinstance(yb, tuple) else (yb,)
    assert [tuple(t.shape) for t in ya] == OUT_SHAPES[name]
    for u, v in zip(ya, yb, strict=True):
        assert torch.equal(u, v)


def test_exported_onnx_has_dynamic_batch_and_matches_torch(tmp_path):
    name = "landmark_net"
    spec = MODEL_SPECS[name]
    p1 = export_torch(build_model(name), spec.input_shape, tmp_path / "a.onnx")
    p2 = export_torch(build_model(name), spec.input_shape, tmp_path / "b.onnx")
    assert hashlib.sha256(p1.read_bytes()).digest() == hashlib.sha256(p2.read_bytes()).digest()
    (inp,) = input_specs(load_onnx(p1))
    assert inp.shape == spec.input_shape
    x = (
        np.random.default_rng(0).standard_normal((3, *spec.input_shape)).astype(np.float32)
    )  # batch 3 != export's 2
    (y,) = ort.InferenceSession(str(p1), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    with torch.no_grad():
        ref = build_model(name)(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-4)


def test_iou_matrix_hand_values():
    a = np.array([[0, 0, 2, 2]], dtype=float)
    b = np.array([[1, 1, 3, 3], [0, 0, 2, 2], [5, 5, 6, 6]], dtype=float)
    # overlap 1x1 = 1; union 4 + 4 - 1 = 7
    np.testing.assert_allclose(iou_matrix(a, b), [[1 / 7, 1.0, 0.0]])


def test_tracker_keeps_identities_of_moving_objects():
    tracker = IouTracker()
    frames = synthetic_detections(40, objects=5, seed=1)
    for f in frames:
        out = tracker.update(f)
    assert sorted(i for i, _ in out) == [0, 1, 2, 3, 4]
