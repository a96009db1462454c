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
    # argparse's own usage error: exit status 2, the reason on the last line
    with pytest.raises(SystemExit) as exc:
        main(["profile", str(tiny_onnx), "--hardware", "c6i.large", "--batches", value])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err.splitlines()[-1]


def test_models_build_unknown_app(capsys, tmp_path):
    line = _one_line_error(capsys, ["models", "build", "--cache", str(tmp_path), "--apps", "nosuch"])
    assert "no application 'nosuch'" in line


def test_models_list(capsys, tmp_path):
    assert main(["models", "list", "--cache", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "ssdlite_mnv2" in out and "iou_tracker" in out
