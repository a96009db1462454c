"""The five demo applications: valid specs, module rates, problems built from the checked-in profiles."""

import pytest

from profiles.build import CPU_MODELS
from profiles.demo.nets import MODEL_SPECS
from profiles.errors import ProfilesError
from profiles.store import PACKAGE_ROOT, LocalStore, load_problem

STORE = LocalStore(PACKAGE_ROOT)
APPS = ["actdet", "caption", "face", "pose", "traffic"]


def test_five_apps():
    assert STORE.list_apps() == APPS


@pytest.mark.parametrize(
    ("app", "rates"),
    [
        # detector gets the frames; 2.0 vehicles and 1.5 people per frame
        ("traffic", {"detector": 30, "vehicle": 60.0, "person": 45.0}),
        ("face", {"detector": 30, "landmarks": 45.0}),  # 1.5 faces per frame
        ("pose", {"detector": 30, "pose": 60.0}),  # 2 people per frame
        ("caption", {"encoder": 30, "decoder": 30.0}),
        ("actdet", {"detector": 30, "tracker": 30.0, "action": 60.0}),  # 1 tracker update, 2 tracks per frame
    ],
)
def test_module_rates(app, rates):
    assert STORE.load_app(app).module_rates(30) == rates


@pytest.mark.parametrize("app", APPS)
def test_every_model_has_a_builder_and_a_profile(app):
    spec = STORE.load_app(app)
    for mod in spec.modules.values():
        if mod.kind == "cpu":
            assert mod.model in CPU_MODELS
        else:
            assert mod.model in MODEL_SPECS
        entries = STORE.load_profile(mod.model)
        assert entries, mod.model
        sources = {(e.model_extra or {}).get("source") for e in entries}
        assert "measured" in sources


@pytest.mark.parametrize("app", APPS)
def test_load_problem_from_checked_in_profiles(app):
    problem = load_problem(app, 10.0, store=STORE)
    spec = STORE.load_app(app)
    assert problem.slo_s == spec.slo_s
    assert set(problem.modules) == set(spec.modules)
    assert {m.rate for m in problem.modules.values()} == set(spec.module_rates(10.0).values())
    assert problem.paths()
    cpu_only = load_problem(app, 5.0, hardware=["c6i.large"], slo_s=1.0, store=STORE)
    assert set(cpu_only.hardware) == {"c6i.large"} and cpu_only.slo_s == 1.0


def test_gpu_only_hardware_cannot_run_the_tracker():
    with pytest.raises(
        ProfilesError, match="module 'tracker' \\(cpu, model iou_tracker\\) has no profile on v100"
    ):
        load_problem("actdet", 10.0, hardware=["v100"], store=STORE)


def test_gpu_entries_are_derived_in_checked_in_data():
    entries = STORE.load_profile_dicts("ssdlite_mnv2")
    gpu = [e for e in entries if e["hardware"] in ("p100", "v100", "t4")]
    assert gpu and all(e["source"] == "derived" for e in gpu)
    large = [e for e in entries if e["hardware"] == "c6i.large"]
    assert large and all(e["source"] == "measured" and e["host_cpu"] for e in large)
    xl = [e for e in entries if e["hardware"] == "c6i.2xlarge"]
    assert xl and all(e["source"] == "derived" for e in xl)


def test_bad_frame_rate():
    with pytest.raises(ProfilesError, match="frame rate must be positive"):
        load_problem("face", 0, store=STORE)
