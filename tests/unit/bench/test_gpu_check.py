"""bench/gpu_check.py: the no-GPU path, the spec it writes (with a fake measurement), the torch timing."""

from __future__ import annotations

import argparse
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench import gpu_check
from bench.gpu_check import DeviceInfo, run_check
from profiles.roofline import load_spec
from skinflint.cli import main as cli_main

H100 = DeviceInfo("NVIDIA H100 80GB HBM3", 79.2, 132, 67.0, 3350, "datasheet", "torch 2.11.0, CUDA 13.0")


def _args(tmp_path, **changes):
    base = {"out": tmp_path / "out", "batches": (1, 8), "runs": 2, "json": False, "no_results": True}
    return argparse.Namespace(**(base | changes))


def test_without_a_gpu_it_says_so_and_exits_0(capsys, tmp_path):
    assert gpu_check.main(_args(tmp_path), detect=lambda: None) == 0
    assert "no CUDA device" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_cli_without_a_gpu(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    assert cli_main(["bench", "gpu-check", "--no-results"]) == 0
    assert "no CUDA device" in capsys.readouterr().out


def _fake_export(name, path):
    """A one-convolution model per name, its width growing with the name's length (different work)."""
    width = len(name)
    w = numpy_helper.from_array(np.ones((width, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", width, 16, 16])],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def _fake_measure(name, runtime, batches, runs, path):
    # 50 us per invocation plus 1 us per output channel and request: the same law for every model
    assert path.is_file() and runs == 2
    return {b: 50e-6 + 1e-6 * len(name) * b for b in batches}


def test_spec_written_with_every_measured_point_as_an_anchor(capsys, tmp_path):
    models = ("aa", "bbbb", "cccccc", "dddddddd")
    figures = run_check(
        tmp_path / "out", H100, ["torch-eager-fp32"], (1, 8), 2,
        models=models, measure=_fake_measure, export=_fake_export, date="2026-11-26",
    )  # fmt: skip
    spec_path = tmp_path / "out" / "torch-eager-fp32.json"
    spec = load_spec(spec_path)
    assert (spec.hardware, spec.runtime, spec.sm_count, spec.peak_fp32_tflops) == (
        "h100",
        "torch-eager-fp32",
        132,
        67.0,
    )
    assert len(spec.anchors) == 4 * 2
    assert all(spec.model_path(anchor).is_file() for anchor in spec.anchors)
    anchor = next(a for a in spec.anchors if a.model == "bbbb.onnx" and a.batch == 8)
    assert anchor.duration_s == pytest.approx(50e-6 + 1e-6 * 4 * 8)  # 82 us
    assert "NVIDIA H100 80GB HBM3" in json.loads(spec_path.read_text())["source"]
    summary = figures["runtimes"]["torch-eager-fp32"]["leave_one_out"]
    assert summary["points"] == 8
    out = capsys.readouterr().out
    assert "leave-one-out" in out and "derived ms" in out


def test_main_measures_with_torch_when_onnxruntime_has_no_cuda(monkeypatch, tmp_path):
    seen = []

    def fake_run_check(out, device, runtimes, batches, runs):
        seen.append((out, runtimes, batches, runs))
        return {}

    monkeypatch.setattr(gpu_check, "ort_cuda_available", lambda: False)
    monkeypatch.setattr(gpu_check, "run_check", fake_run_check)
    assert gpu_check.main(_args(tmp_path), detect=lambda: H100) == 0
    assert seen == [(tmp_path / "out", ("torch-eager-fp32", "torch-cudagraph-fp32"), (1, 8), 2)]


def test_hardware_label():
    assert H100.hardware == "h100"
    other = DeviceInfo("NVIDIA RTX 9000 Ada", 48, 142, 90.0, 960, "estimated", "")
    assert other.hardware == "rtx-9000-ada"


def test_measure_torch_eager_times_a_call():
    torch = pytest.importorskip("torch")
    seconds = gpu_check.measure_torch(torch.nn.Linear(8, 4), (8,), 4, "eager", runs=3, warmup=1)
    assert 0 < seconds < 1.0
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA graphs need a CUDA device"):
            gpu_check.measure_torch(torch.nn.Linear(8, 4), (8,), 4, "graph", runs=1, warmup=0)


def test_demo_models_load_without_the_profiles_package():
    pytest.importorskip("torch")
    module, shape, input_name, outputs = gpu_check.build_demo("landmark_net")
    assert shape == (3, 96, 96) and input_name == "input" and outputs == ("output",)
    assert not module.training


def _tiny_net(name):
    """A held-out stand-in: a small conv net whose width grows with the name (a real builder uses timm)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    width = 2 * len(name)
    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(width, 4),
    )  # fmt: skip
    return module.eval(), (3, 16, 16), "input", ("output",)


def test_held_out_architectures_are_derived_from_the_runs_anchors_and_never_fitted(capsys, tmp_path):
    out = tmp_path / "out"
    run_check(
        out, H100, ["torch-eager-fp32"], (1, 8), 2,
        models=("aa", "bbbb", "cccccc", "dddddddd"), measure=_fake_measure, export=_fake_export,
    )  # fmt: skip
    anchors_before = (out / "torch-eager-fp32.json").read_text()
    seen = []

    def measure(module, shape, batch, mode, runs):
        seen.append((shape, batch, mode, runs))
        if batch == 8 and len(seen) > 2:
            raise RuntimeError("capture failed")  # one point that cannot be measured is reported, not fatal
        return 1e-4 * batch

    def build(name):
        if name == "broken":
            raise ValueError("no such architecture")
        return _tiny_net(name)

    result = gpu_check.held_out_check(
        out, ["netx", "broken", "netyy"], ["torch-eager-fp32"], (1, 8), 3, build=build, measure=measure
    )
    text = capsys.readouterr().out
    assert "held-out broken: skipped (ValueError: no such architecture)" in text
    assert "held-out netyy b8: not measured (RuntimeError: capture failed)" in text
    points = result["torch-eager-fp32"]["points"]
    assert [(p["model"], p["batch"]) for p in points] == [("netx", 1), ("netx", 8), ("netyy", 1)]
    assert all(p["derived_s"] > 0 and p["ratio"] == p["derived_s"] / p["measured_s"] for p in points)
    assert result["torch-eager-fp32"]["summary"]["points"] == 3
    assert (out / "held-out" / "netx.onnx").is_file()
    assert (out / "torch-eager-fp32.json").read_text() == anchors_before  # held-out models never anchor
    assert seen[0] == ((3, 16, 16), 1, "eager", 3)


def test_held_out_without_timm_is_skipped_with_a_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(gpu_check, "ort_cuda_available", lambda: False)
    monkeypatch.setattr(gpu_check, "run_check", lambda *a: {})
    monkeypatch.setattr(gpu_check.importlib.util, "find_spec", lambda name: None)
    assert gpu_check.main(_args(tmp_path, held_out=("vit_tiny_patch16_224",)), detect=lambda: H100) == 0
    assert "timm is not installed" in capsys.readouterr().out


def test_roofline_loads_without_the_planners_dependencies(tmp_path):
    """On a bare GPU machine pydantic is missing: the roofline still loads and counts an ONNX file."""
    import subprocess
    import sys
    from pathlib import Path

    _fake_export("abc", tmp_path / "abc.onnx")
    script = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'pydantic': raise ImportError('no pydantic here')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from bench import gpu_check\n"
        "roofline = gpu_check._roofline()\n"
        f"work = roofline.model_work({str(tmp_path / 'abc.onnx')!r})\n"
        "assert 'planner.models' not in sys.modules\n"
        "print(work.name, work.launches)\n"
    )
    root = Path(gpu_check.__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "abc"


def test_held_out_names_parse():
    assert gpu_check._names(" a, b ,") == ("a", "b")
    with pytest.raises(argparse.ArgumentTypeError):
        gpu_check._names(" , ")
