"""The GPU measuring path, exercised without a GPU: onnxruntime is made to report a CUDA provider and
``nvidia-smi`` to name a card, and the profiler must then *measure* on the GPU class (CUDA first in
the session's providers, provenance ``CUDAExecutionProvider``) instead of refusing or deriving."""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

import onnxruntime as ort
import pytest

from profiles import build as build_mod
from skinflint.cli import main

CUDA = "CUDAExecutionProvider"


@pytest.fixture
def fake_cuda(monkeypatch):
    """CUDA looks available; sessions record the providers asked for and run on the CPU."""
    requested: list[list[str]] = []
    real_session = ort.InferenceSession

    def session(path, sess_options=None, providers=None, **kw):
        requested.append(list(providers or []))
        return real_session(path, sess_options=sess_options, providers=["CPUExecutionProvider"])

    monkeypatch.setattr(ort, "get_available_providers", lambda: [CUDA, "CPUExecutionProvider"])
    monkeypatch.setattr(ort, "InferenceSession", session)
    return requested


def test_profile_on_a_gpu_class_measures_with_cuda(fake_cuda, tiny_onnx, tmp_path, capsys):
    out = tmp_path / "tiny_v100.json"
    code = main(
        ["profile", str(tiny_onnx), "--hardware", "v100", "--batches", "1,2", "--runs", "2",
         "--out", str(out), "--json"]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert fake_cuda and all(p[0] == CUDA for p in fake_cuda)
    entries = json.loads(out.read_text())
    assert {e["hardware"] for e in entries} == {"v100"}
    assert all(e["source"] == "measured" and e["provider"] == CUDA for e in entries)


@pytest.mark.parametrize(
    ("smi", "expected"),
    [("Tesla V100-SXM2-16GB\n", "v100"), ("Tesla T4\n", "t4"), ("NVIDIA A10G\n", None)],
)
def test_detect_gpu_names_the_catalog_class(fake_cuda, monkeypatch, smi, expected):
    monkeypatch.setattr("shutil.which", lambda _name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: SimpleNamespace(stdout=smi, returncode=0))
    assert build_mod.detect_gpu() == expected


def test_detect_gpu_without_nvidia_smi(fake_cuda, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda _name: None)
    assert build_mod.detect_gpu() is None


def test_measured_gpu_is_not_also_derived(monkeypatch):
    """With a GPU measured, the build keeps only CPU entries from the CPU series (the GPU's come from
    the GPU series); without one it derives every GPU class."""
    from profiles.hardware import load_catalog

    calls: list[str] = []
    monkeypatch.setattr(build_mod, "derive_gpu_entries", lambda *a, **k: calls.append("derived") or [])
    monkeypatch.setattr(build_mod, "cpu_size_entries", lambda *a, **k: ([], {}))
    result = SimpleNamespace(
        provenance={}, model_sha256="x", points=[], model="m", cost=SimpleNamespace(as_dict=dict),
        series=lambda *a, **k: [],
    )  # fmt: skip
    cfg = build_mod.BuildConfig()
    catalog = load_catalog()
    assert build_mod._dnn_entries(result, cfg, catalog, "2026-11-21", "t4") == []
    assert calls == []
    build_mod._dnn_entries(result, cfg, catalog, "2026-11-21", None)
    assert calls == ["derived"]
