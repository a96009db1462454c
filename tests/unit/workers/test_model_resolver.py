"""Which runtime a share gets: a spec that could not be read fails the adoption (it is tried again), an
unknown app's share is emulated, a known one with its model file runs onnx."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from control.errors import ControlError
from core.errors import DataPlaneError
from planner.packing import Share
from workers.shares import ModelResolver


def _share() -> Share:
    return Share(app="cams", module="det", group=0, machine=0, hardware="t4", batch=1, concurrency=1,
                 duration_s=0.01, rate=10.0, occupancy=0.1)  # fmt: skip


def _deployment(emulated: tuple[str, ...] = ()) -> Any:
    return SimpleNamespace(emulated_hardware=list(emulated))


def _spec(model: str) -> Any:
    return SimpleNamespace(modules={"det": SimpleNamespace(model=model)})


def test_a_spec_that_cannot_be_read_fails_the_adoption_instead_of_emulating(tmp_path: Any) -> None:
    (tmp_path / "det-net.onnx").write_bytes(b"onnx")

    def unreachable(app: str) -> Any:
        raise ControlError(f"cannot read app {app!r}: Could not connect to the endpoint URL")

    resolve = ModelResolver(unreachable, lambda _m: [], str(tmp_path))
    with pytest.raises(DataPlaneError, match="Could not connect"):
        resolve(_deployment(), _share())
    # once the registry answers, the same resolver gives the real model (nothing was cached)
    calls = iter([ControlError("blip"), _spec("det-net")])

    def flaky(app: str) -> Any:
        got = next(calls)
        if isinstance(got, Exception):
            raise got
        return got

    resolve = ModelResolver(flaky, lambda _m: [], str(tmp_path))
    with pytest.raises(DataPlaneError):
        resolve(_deployment(), _share())
    runtime, model, path, threads = resolve(_deployment(), _share())
    assert (runtime, model, threads) == ("onnx", "det-net", 1) and path is not None


def test_an_unknown_app_or_a_missing_model_file_is_emulated(tmp_path: Any) -> None:
    def unknown(app: str) -> Any:
        raise KeyError(app)

    assert ModelResolver(unknown, lambda _m: [], str(tmp_path))(_deployment(), _share())[0] == "emulated"
    no_file = ModelResolver(lambda _a: _spec("det-net"), lambda _m: [], str(tmp_path))
    assert no_file(_deployment(), _share())[:2] == ("emulated", "det-net")
    (tmp_path / "det-net.onnx").write_bytes(b"onnx")
    assert no_file(_deployment(("t4",)), _share())[0] == "emulated"  # the deployment emulates t4
