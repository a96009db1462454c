"""Before a claim (issue #27): the provider a runtime asks for and refuses, the models planned on the
instance's class, the on-instance sweep it starts, and an agent that claims nothing when refused.
No GPU here: onnxruntime is replaced by a fake for the provider logic."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from core.schema import Deployment
from planner.models import MachineGroup, ModulePlan, Plan
from planner.packing import FleetPlan, Instance, plan_shares
from profiles.onsite import ONSITE_NOTE, InstanceInfo, measure_on_instance, profile_source
from profiles.store import LocalStore
from tests.unit.workers.test_runtimes import gray_model  # noqa: F401 - the fixture
from workers.agent import InstanceAgent
from workers.onsite import BeforeClaim, _with_neighbours, check_providers, planned_points
from workers.runtimes import CPU_PROVIDER, CUDA_PROVIDER, EmulatedRuntime, OnnxRuntime, ProviderError
from workers.shares import RuntimeCache, WorkerServices

# -- the provider: asked for, checked, refused ------------------------------------------------------


class _FakeInput:
    name, shape = "x", ["batch", 1, 4, 4]


class _FakeSession:
    def __init__(self, running: list[str]):
        self.running = running

    def get_providers(self) -> list[str]:
        return self.running

    def get_inputs(self) -> list[_FakeInput]:
        return [_FakeInput()]

    def run(self, _names: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [np.tile(np.array([0.1, 0.7, 0.2], dtype=np.float32), (len(feeds["x"]), 1))]


class _FakeOrt:
    """onnxruntime with ``available`` providers whose session runs ``running`` (CUDA that cannot
    start makes onnxruntime fall back to the CPU provider, only logging it)."""

    def __init__(self, available: list[str], running: list[str] | None = None):
        self.available, self.running = available, running
        self.asked: list[Any] = []

    class SessionOptions:
        intra_op_num_threads = inter_op_num_threads = 0

    def get_available_providers(self) -> list[str]:
        return self.available

    def InferenceSession(self, _path: str, sess_options: Any, providers: list[Any]) -> _FakeSession:  # noqa: N802
        self.asked.append(providers)
        names = [p[0] if isinstance(p, tuple) else p for p in providers]
        return _FakeSession(self.running if self.running is not None else names)


def test_a_gpu_class_asks_for_the_cuda_provider_alone_and_reports_it_in_every_result():
    ort = _FakeOrt([CUDA_PROVIDER, CPU_PROVIDER])
    rt = OnnxRuntime("m.onnx", gpu=True, device_id=0, device="cuda:0 NVIDIA T4", ort=ort)
    assert ort.asked == [[(CUDA_PROVIDER, {"device_id": 0})]]  # no CPU fallback in the list
    out = rt.run([np.zeros((1, 4, 4), dtype=np.float32)] * 2)
    assert [o["label"] for o in out] == [1, 1]
    assert all(o["provider"] == CUDA_PROVIDER and o["device"] == "cuda:0 NVIDIA T4" for o in out)


def test_a_cpu_class_runs_the_cpu_provider_even_where_cuda_is_installed():
    ort = _FakeOrt([CUDA_PROVIDER, CPU_PROVIDER])
    rt = OnnxRuntime("m.onnx", device="cpu test", ort=ort)
    assert ort.asked == [[CPU_PROVIDER]] and rt.provider == CPU_PROVIDER


def test_a_gpu_class_without_the_cuda_provider_is_refused():
    with pytest.raises(ProviderError) as err:
        OnnxRuntime("m.onnx", gpu=True, device="-", ort=_FakeOrt([CPU_PROVIDER]))
    assert err.value.wanted == CUDA_PROVIDER and err.value.available == [CPU_PROVIDER]


def test_a_session_that_fell_back_to_the_cpu_is_refused():
    ort = _FakeOrt([CUDA_PROVIDER, CPU_PROVIDER], running=[CPU_PROVIDER])
    with pytest.raises(ProviderError, match="runs CPUExecutionProvider where CUDAExecutionProvider"):
        OnnxRuntime("m.onnx", gpu=True, device="-", ort=ort)


def test_the_real_cpu_runtime_names_its_device(gray_model: str):  # noqa: F811 - the fixture
    out = OnnxRuntime(gray_model).run([np.zeros((1, 4, 4), dtype=np.float32)])
    assert out[0]["provider"] == CPU_PROVIDER and out[0]["device"].startswith("cpu")


def test_emulated_results_say_so():
    out = EmulatedRuntime(0.0, "t4", sleep=lambda _s: None).run([1])
    assert out == [{"emulated": True, "hardware": "t4"}]  # no provider or device: nothing ran


# -- what the class's slots plan, and the hook before the claim -------------------------------------


def _plan() -> Plan:
    group = MachineGroup(hardware="c6i.large", batch=4, machines=1, rate_per_machine=4.0, duration_s=0.05)
    gpu = MachineGroup(hardware="t4", batch=8, machines=1, rate_per_machine=8.0, duration_s=0.02)
    return Plan(
        objective="billed",
        cost_per_hour=1.0,
        billed_per_hour=1.0,
        solve_ms=0.0,
        modules={
            "det": ModulePlan(latency_budget_s=1.0, worst_case_latency_s=1.0, groups=[group]),
            "cls": ModulePlan(latency_budget_s=1.0, worst_case_latency_s=1.0, groups=[gpu]),
        },
    )


def _deployment(plan: Plan) -> Deployment:
    return Deployment(
        app="traffic",
        version=3,
        origin_s=0.0,
        slo_s=2.0,
        frame_rate=4.0,
        roots=["det"],
        edges=[("det", "cls", 1.0)],
        plan=plan,
        queues={"det": {"0/0": "q-det"}, "cls": {"0/0": "q-cls"}},
    )


def _fleet(plan: Plan) -> FleetPlan:
    shares = plan_shares("traffic", plan)
    return FleetPlan(
        instances=[Instance(slot=f"{s.hardware}/0", hardware=s.hardware, shares=[s]) for s in shares],
        prices={"c6i.large": 0.085, "t4": 0.526},
        occupancy_per_hour=1.0,
        dedicated_per_hour=1.0,
    )


def _resolve(_dep: Deployment, share: Any) -> tuple[str, str, str | None, int]:
    model = {"det": "detnet", "cls": "clsnet"}[share.module]
    return "onnx", model, f"/models/{model}.onnx", 2


def test_planned_points_are_the_real_models_of_the_class_with_the_settings_they_serve_with():
    plan = _plan()
    points = planned_points(_fleet(plan), "c6i.large", lambda _app: _deployment(plan), _resolve)
    assert points.paths == {"detnet": "/models/detnet.onnx"}  # clsnet is planned on t4 only
    assert points.batches == {"detnet": {4}} and points.series == {"detnet": {(1, 2)}}

    def emulated(_dep: Deployment, _share: Any) -> tuple[str, str, str | None, int]:
        return "emulated", "detnet", None, 1

    assert not planned_points(_fleet(plan), "c6i.large", lambda _app: _deployment(plan), emulated).paths


@pytest.mark.parametrize(
    ("planned", "want"),
    [
        ({4}, [2, 4, 8]),  # one power of two either side of the planned batch
        ({1}, [1, 2]),  # nothing below 1
        ({3}, [2, 3, 4]),  # a batch off the grid: the grid points around it
        ({2, 8}, [1, 2, 4, 8, 16]),
    ],
)
def test_the_sweep_covers_the_planned_batches_and_their_neighbours(planned, want):
    assert _with_neighbours(planned) == want


CPU = InstanceInfo("c6i.large", "cpu test", "6.1", "onnxruntime 1.x", CPU_PROVIDER)


@dataclass
class _Calls:
    measured: list[dict[str, Any]] = field(default_factory=list)


def _hook(store: Any, calls: _Calls, **kw: Any) -> BeforeClaim:
    plan = _plan()

    def measure(
        store_: Any, models: dict[str, str], hardware: str, batches: list[int], info: Any, **opts: Any
    ):
        calls.measured.append({"models": models, "hardware": hardware, "batches": batches, **opts})
        return measure_on_instance(store_, models, hardware, batches, info, **opts, profile=_fake_profile)

    return BeforeClaim(
        hardware=kw.pop("hardware", "c6i.large"),
        instance_id="i-1",
        fleet=lambda _v: _fleet(plan),
        deployment=lambda _v, _app: _deployment(plan),
        resolve=_resolve,
        runtimes=kw.pop("runtimes", RuntimeCache(make=lambda a: EmulatedRuntime(0.0, a.hardware))),
        instance=CPU,
        store=store,
        measure=measure,
        log=lambda _line: None,
        **kw,
    )


class _FakeResult:
    def __init__(self, batches: tuple[int, ...], series: list[tuple[int, int]]):
        self.batches, self.series = batches, series

    def entries(self, hardware: str) -> list[dict[str, Any]]:
        c, t = self.series[0]
        return [
            {"hardware": hardware, "batch": b, "concurrency": c, "threads": t, "duration_s": 0.01 * b}
            for b in self.batches
        ]


def _fake_profile(path: str, cfg: Any, name: str, progress: Any, series: Any = None) -> _FakeResult:
    progress("b=1")
    return _FakeResult(cfg.batches, series or [(1, 1)])


def test_before_the_claim_the_class_measures_its_planned_models_once(tmp_path):
    store = LocalStore(tmp_path)
    derived = {"hardware": "c6i.large", "concurrency": 1, "duration_s": 0.5, "source": "derived"}
    store.save_profile("detnet", [derived | {"batch": b} for b in (1, 2, 4, 8, 16)])
    calls = _Calls()
    hook = _hook(store, calls)
    hook(3)
    hook(3)  # the same version again: nothing more
    assert len(calls.measured) == 1
    call = calls.measured[0]
    assert call["models"] == {"detnet": "/models/detnet.onnx"}
    assert call["per_model_batches"] == {"detnet": [2, 4, 8]} and call["series"] == {"detnet": [(1, 2)]}
    entries = store.load_profile_dicts("detnet")
    assert [e["batch"] for e in entries] == [2, 4, 8] and {e["threads"] for e in entries} == {2}
    assert profile_source(entries, "c6i.large") == ONSITE_NOTE
    assert all(e["instance_type"] == "c6i.large" and e["device"] == "cpu test" for e in entries)
    hook(4)  # a later version: the model was measured by this agent already
    assert len(calls.measured) == 1


def test_a_class_measured_on_a_development_host_is_measured_again_only_when_asked(tmp_path):
    store = LocalStore(tmp_path)
    host = {"hardware": "c6i.large", "batch": 4, "concurrency": 1, "duration_s": 0.05, "source": "measured"}
    store.save_profile("detnet", [host])
    _hook(store, _Calls())(3)
    assert store.load_profile_dicts("detnet") == [host]  # "derived" mode: measured is measured
    _hook(store, _Calls(), require_onsite=True)(3)
    assert profile_source(store.load_profile_dicts("detnet"), "c6i.large") == ONSITE_NOTE


def test_a_gpu_class_whose_provider_fails_raises_before_anything_is_measured(tmp_path):
    def refuse(_assignment: Any) -> Any:
        raise ProviderError(CUDA_PROVIDER, [CPU_PROVIDER], [CUDA_PROVIDER, CPU_PROVIDER])

    calls = _Calls()
    hook = _hook(LocalStore(tmp_path), calls, hardware="t4", gpu=True, runtimes=RuntimeCache(make=refuse))
    with pytest.raises(ProviderError):
        hook(3)
    assert not calls.measured


def test_check_providers_loads_each_planned_model_through_the_agents_cache():
    plan = _plan()
    points = planned_points(_fleet(plan), "t4", lambda _app: _deployment(plan), _resolve)
    cache = RuntimeCache(make=lambda a: EmulatedRuntime(0.0, a.hardware))
    assert check_providers(points, cache, "i-1") == ["clsnet"] and cache.loads == 1


# -- the agent: refused, it claims nothing -----------------------------------------------------------


class _Plans:
    def __init__(self) -> None:
        self.claims = 0

    def current_hinted(self) -> Any:
        return type("M", (), {"version": 3, "activate_at": 0.0, "previous": None})()

    def deployment(self, _version: int, _app: str) -> Any:
        return None

    def claim(self, *_args: Any) -> Any:
        self.claims += 1
        return None

    def release(self, *_args: Any) -> Any:
        return []


class _Metrics:
    def put(self, *_args: Any, **_kw: Any) -> None:
        return None


def test_an_agent_whose_provider_is_refused_claims_no_slot_and_says_why():
    plans, beats = _Plans(), []

    def refuse(_version: int) -> None:
        raise ProviderError(CUDA_PROVIDER, [], [CPU_PROVIDER])

    agent = InstanceAgent(
        instance_id="i-1",
        hardware="t4",
        plans=plans,
        services=WorkerServices(queues=None, results=None, blobs=None, metrics=_Metrics()),  # type: ignore[arg-type]
        resolve=_resolve,
        heartbeat=beats.append,
        before_claim=refuse,
        clock=lambda: 100.0,
    )
    agent.step()
    agent.step()
    assert plans.claims == 0 and agent.state == "refused"
    assert "CUDAExecutionProvider" in beats[-1]["refused"]


def test_an_agent_claims_after_its_hook_ran():
    plans, seen = _Plans(), []
    agent = InstanceAgent(
        instance_id="i-1",
        hardware="c6i.large",
        plans=plans,
        services=WorkerServices(queues=None, results=None, blobs=None, metrics=_Metrics()),  # type: ignore[arg-type]
        resolve=_resolve,
        before_claim=seen.append,
        clock=lambda: 100.0,
    )
    agent.step()
    assert seen == [3] and plans.claims == 1 and agent.state == "idle"


def test_a_hook_that_fails_otherwise_does_not_stop_the_claim():
    plans = _Plans()

    def broken(_version: int) -> None:
        raise RuntimeError("a bug")

    agent = InstanceAgent(
        instance_id="i-1",
        hardware="c6i.large",
        plans=plans,
        services=WorkerServices(queues=None, results=None, blobs=None, metrics=_Metrics()),  # type: ignore[arg-type]
        resolve=_resolve,
        before_claim=broken,
        clock=lambda: 100.0,
    )
    agent.step()
    assert plans.claims == 1 and agent.refused is None
