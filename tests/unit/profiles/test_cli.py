"""The ``skinflint profile`` / ``models`` commands: clean one-line errors, JSON output, profile file."""

import json

import pytest

from planner.models import ProfileEntry
from skinflint.cli import main


def _one_line_error(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("skinflint: note:")]
    assert code != 0
    assert len(lines) == 1, err
    assert lines[0].startswith("skinflint: error: ")
    assert "Traceback" not in err
    return lines[0]


def test_not_onnx_file(capsys, not_onnx):
    line = _one_line_error(capsys, ["profile", str(not_onnx), "--hardware", "c6i.large", "--runs", "1"])
    assert "not a valid ONNX model" in line


def test_missing_file(capsys, tmp_path):
    line = _one_line_error(capsys, ["profile", str(tmp_path / "x.onnx"), "--hardware", "c6i.large"])
    assert "no such file" in line


def test_model_without_batch_dimension(capsys, fixed_batch_onnx):
    line = _one_line_error(
        capsys, ["profile", str(fixed_batch_onnx), "--hardware", "c6i.large", "--runs", "1"]
    )
    assert "fixed shape" in line and "dynamic" in line


def test_shape_that_cannot_be_inferred(capsys, symbolic_onnx):
    line = _one_line_error(capsys, ["profile", str(symbolic_onnx), "--hardware", "c6i.large", "--runs", "1"])
    assert "--input-shape" in line


def test_unknown_hardware(capsys, tiny_onnx):
    line = _one_line_error(capsys, ["profile", str(tiny_onnx), "--hardware", "a100"])
    assert "unknown hardware 'a100'" in line


def test_gpu_hardware_without_cuda(capsys, tiny_onnx):
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has CUDA: the GPU is measured")
    line = _one_line_error(capsys, ["profile", str(tiny_onnx), "--hardware", "v100", "--runs", "1"])
    assert "no CUDA provider" in line


def test_profile_writes_entries_and_json(capsys, tiny_onnx, tmp_path):
    out = tmp_path / "tiny.json"
    code = main(
        ["profile", str(tiny_onnx), "--hardware", "c6i.large", "--batches", "1,2", "--threads", "1,2",
         "--runs", "3", "--warmup", "1", "--out", str(out), "--json"]
    )  # fmt: skip
    cap = capsys.readouterr()
    assert code == 0, cap.err
    summary = json.loads(cap.out)
    assert set(summary["fits"]) == {"c1_t1", "c1_t2"}
    assert set(summary["hitdl"]) == {"1", "2"}  # HiTDL L(n) per batch from n = 1, 2
    entries = json.loads(out.read_text())
    assert len(entries) == 4
    assert all(ProfileEntry.model_validate(e).hardware == "c6i.large" for e in entries)


def test_profile_table_output(capsys, tiny_onnx):
    code = main(["profile", str(tiny_onnx), "--hardware", "c6i.large", "--batches", "1,2", "--runs", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert "linear fit c1_t" in out


@pytest.mark.parametrize(
    ("value", "message"), [("0,2", "positive integers"), ("1,x", "comma-separated integers")]
)
def test_bad_batches_argument(capsys, tiny_onnx, value, message):
    # checked by the command, not argparse: one line, exit status 1
    line = _one_line_error(capsys, ["profile", str(tiny_onnx), "--hardware", "c6i.large", "--batches", value])
    assert message in line


def test_models_build_unknown_app(capsys, tmp_path):
    line = _one_line_error(capsys, ["models", "build", "--cache", str(tmp_path), "--apps", "nosuch"])
    assert "no application 'nosuch'" in line


def test_models_list(capsys, tmp_path):
    assert main(["models", "list", "--cache", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "ssdlite_mnv2" in out and "iou_tracker" in out


@pytest.fixture
def tiny_spec(tmp_path, tiny_onnx):
    """A device spec whose anchors are the tiny model measured (made up) at batches 1 and 8."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.onnx").write_bytes(tiny_onnx.read_bytes())
    spec = {
        "hardware": "h100",
        "peak_fp32_tflops": 67.0,
        "memory_bandwidth_gbps": 3350,
        "gpu_memory_gib": 80,
        "runtime": "torch-eager-fp32",
        "anchors": [
            {"model": "models/tiny.onnx", "batch": 1, "duration_s": 0.0002},
            {"model": "models/tiny.onnx", "batch": 8, "duration_s": 0.0003},
        ],
    }
    path = tmp_path / "h100.json"
    path.write_text(json.dumps(spec))
    return path


def test_profile_derive_json(capsys, tiny_onnx, tiny_spec):
    code = main(
        ["profile", "derive", str(tiny_onnx), "--gpu", str(tiny_spec), "--batches", "1,8,32", "--json"]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["batch"] for p in out["points"]] == [1, 8, 32]
    for point in out["points"]:
        assert set(point) == {"batch", "duration_s", "source", "method"}
        assert point["source"] == "derived" and point["duration_s"] > 0
    assert out["fit"]["anchors"] == ["tiny"]


def test_profile_derive_table(capsys, tiny_onnx, tiny_spec):
    assert main(["profile", "derive", str(tiny_onnx), "--gpu", str(tiny_spec)]) == 0
    out = capsys.readouterr().out
    assert "derived" in out and "roofline" in out


@pytest.mark.parametrize(
    ("argv_tail", "message"),
    [
        (["--batches", "0"], "positive integers"),
        (["--gpu", "SPEC_NO_ANCHORS"], "no anchors"),
        ([], "needs --gpu"),
    ],
)
def test_profile_derive_bad_input(capsys, tmp_path, tiny_onnx, tiny_spec, argv_tail, message):
    no_anchors = tmp_path / "none.json"
    no_anchors.write_text(json.dumps(json.loads(tiny_spec.read_text()) | {"anchors": []}))
    tail = [str(no_anchors) if arg == "SPEC_NO_ANCHORS" else arg for arg in argv_tail]
    if "--gpu" not in tail and message != "needs --gpu":
        tail += ["--gpu", str(tiny_spec)]
    line = _one_line_error(capsys, ["profile", "derive", str(tiny_onnx), *tail])
    assert message in line
    assert main(["profile", "derive", str(tiny_onnx), *tail]) == 1


def test_profile_derive_unreadable_onnx(capsys, not_onnx, tiny_spec):
    line = _one_line_error(capsys, ["profile", "derive", str(not_onnx), "--gpu", str(tiny_spec)])
    assert "not a valid ONNX model" in line


def test_profile_needs_hardware_to_measure(capsys, tiny_onnx):
    line = _one_line_error(capsys, ["profile", str(tiny_onnx)])
    assert "--hardware is required" in line


def test_profile_derive_anchor_file_missing(capsys, tiny_onnx, tiny_spec):
    (tiny_spec.parent / "models" / "tiny.onnx").unlink()
    line = _one_line_error(capsys, ["profile", "derive", str(tiny_onnx), "--gpu", str(tiny_spec)])
    assert "tiny.onnx: no such file" in line
