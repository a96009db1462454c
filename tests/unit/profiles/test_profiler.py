"""The profiler on a tiny ONNX model built in the test (few runs, via ``runs``)."""

import pytest
import torch

from planner.models import ProfileEntry
from profiles.profiler import ProfileConfig, plan_series, profile_module, profile_onnx

PROVENANCE = {"source", "host_cpu", "runtime", "runtime_version", "threads", "date", "provider"}


def test_profiles_batches_and_concurrency(tiny_onnx):
    cfg = ProfileConfig("c6i.large", batches=(1, 2, 4), concurrency=(1, 2), threads=2, runs=4, warmup=1)
    ticks = []
    result = profile_onnx(tiny_onnx, cfg, progress=ticks.append)
    assert len(result.points) == 6 and len(ticks) == 6
    assert {(p.concurrency, p.threads) for p in result.points} == {(1, 2), (2, 1)}
    for p in result.points:
        assert p.runs == 4
        assert 0 < p.median_s <= p.p95_s
        assert p.spread >= 1.0
        assert p.peak_rss_mb > 0
    entries = result.entries()
    for e in entries:
        ProfileEntry.model_validate(e)  # the planner can read it
        assert PROVENANCE <= set(e)
        assert e["source"] == "measured" and e["runtime"] == "onnxruntime"
    fits = result.fits()
    assert set(fits) == {(1, 2), (2, 1)}
    assert result.limits == []


def test_plan_series_splits_threads():
    # 2 threads: concurrency 1 -> one session with 2 threads; concurrency 2 -> two with 1 each
    assert plan_series(ProfileConfig("x", concurrency=(1, 2), threads=2)) == [(1, 2), (2, 1)]
    assert plan_series(ProfileConfig("x", concurrency=(4,), threads=2)) == [(4, 1)]


def test_memory_cap_is_recorded_not_raised(tiny_onnx):
    # A cap below the process's current RSS: the second batch is predicted not to fit.
    cfg = ProfileConfig("c6i.large", batches=(1, 2, 4), threads=1, runs=2, warmup=1, max_memory_mb=1.0)
    result = profile_onnx(tiny_onnx, cfg)
    assert [p.batch for p in result.points] == [1]
    (limit,) = result.limits
    assert limit.batch == 2 and limit.reason.startswith("memory")
    assert "limit" in result.entries()[-1]


def test_duration_cap_stops_growing(tiny_onnx):
    cfg = ProfileConfig("c6i.large", batches=(1, 2, 4), threads=1, runs=2, warmup=1, max_duration_s=1e-9)
    result = profile_onnx(tiny_onnx, cfg)
    assert len(result.points) <= 1
    assert result.limits[0].reason.startswith("duration")


def test_profile_torch_module():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    cfg = ProfileConfig("c6i.large", batches=(1, 4), threads=1, runs=3, warmup=1)
    result = profile_module(module, (8,), cfg, name="mlp")
    assert result.model == "mlp"
    assert [p.batch for p in result.points] == [1, 4]
    # 2*(8*16) + 2*(16*2) = 256 + 64 = 320 FLOPs per request
    assert result.cost.flops == pytest.approx(320)
