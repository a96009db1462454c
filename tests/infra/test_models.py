"""The ONNX models reach the instances: the models directory ``skinflint models build`` writes ships
as an S3 asset (its ``<model>.onnx`` files only), each worker role may read that one object, and the
boot script downloads and unpacks it and points the agent at it. Without built models synthesis
stops with one line, unless ``-c models=none`` says to deploy without (tested in test_variants.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from cdk import constants as C
from cdk.app import _argv_context
from cdk.config import InfraConfigError, models_dir
from tests.infra.conftest import FIXTURE_MODELS, resources
from tests.infra.test_wiring import _allowed, user_data_text

if TYPE_CHECKING:
    from pathlib import Path

    from tests.infra.conftest import Assembly

pytestmark = pytest.mark.infra

_ASSETS_BUCKET = "cdk-hnb659fds-assets-"  # the bootstrap bucket's name prefix (default qualifier)


def _asset_hashes(assembly: Assembly) -> dict[str, str]:
    """The fleet stack's file assets: source directory name -> object key hash."""
    doc = json.loads((assembly.outdir / f"{C.FLEET_STACK}.assets.json").read_text())
    return {f["source"]["path"]: key for key, f in doc["files"].items() if f["source"].get("packaging")}


def _models_key(assembly: Assembly) -> str:
    """The object key of the models archive, from the t4 role's Models statement."""
    (st,) = [s for s in _allowed(assembly.template(C.FLEET_STACK), "Rolet4") if s.get("Sid") == "Models"]
    (key,) = re.findall(r"/([0-9a-f]{64})\.zip", json.dumps(st["Resource"]))
    return key


def test_models_asset_holds_exactly_the_built_models(assembly: Assembly, models_dir: Path) -> None:
    key = _models_key(assembly)
    assert _asset_hashes(assembly)[f"asset.{key}"] == key
    staged = assembly.outdir / f"asset.{key}"
    shipped = {p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()}
    # no half-written .onnx.tmp, no note, no subdirectory: the agent loads <model>.onnx only
    assert shipped == set(FIXTURE_MODELS)
    for name, data in FIXTURE_MODELS.items():
        assert (staged / name).read_bytes() == data == (models_dir / name).read_bytes()


def test_each_worker_role_reads_only_its_own_archives(assembly: Assembly) -> None:
    """s3:GetObject on the assets bucket: exactly the code archive (and wheels when built) and the
    models archive, each one object, no wildcard; the Models statement names the models object."""
    doc = assembly.template(C.FLEET_STACK)
    hashes = set(_asset_hashes(assembly).values())
    models = _models_key(assembly)
    roles = [lid for lid in resources(doc, "AWS::IAM::Role") if lid.startswith("Role")]
    assert len(roles) >= 3
    for lid in roles:
        on_assets: list[Any] = []
        for st in _allowed(doc, lid):
            targets = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
            on_assets += [t for t in targets if _ASSETS_BUCKET in json.dumps(t)]
            if st.get("Sid") == "Models":
                assert st["Action"] == "s3:GetObject", st
                assert len(targets) == 1 and f"/{models}.zip" in json.dumps(targets[0]), st
        keys = [re.findall(r"/([0-9a-f]{64})\.zip\"", json.dumps(t)) for t in on_assets]
        assert all(len(k) == 1 for k in keys), (lid, on_assets)  # one literal object each, no "*"
        assert {k[0] for k in keys} <= hashes and models in {k[0] for k in keys}, lid
        assert "*" not in json.dumps(on_assets), lid


def test_boot_script_downloads_unpacks_and_points_the_agent_at_the_models(assembly: Assembly) -> None:
    doc = assembly.template(C.FLEET_STACK)
    models = _models_key(assembly)
    archive = f"{C.WORKER_MODEL_DIR}.zip"
    for hw in ("t4", "v100", "c6i.large"):
        ud = user_data_text(doc, hw)
        lines = ud.splitlines()
        (download,) = [
            i
            for i, line in enumerate(lines)
            if re.fullmatch(rf"aws s3 cp 's3://{_ASSETS_BUCKET}[^/']+/{models}\.zip' '{archive}'", line)
        ]
        strict = lines.index("set -euo pipefail")
        mkdir = next(
            i for i, line in enumerate(lines) if line.startswith("install -d") and C.WORKER_MODEL_DIR in line
        )
        unzip = lines.index(f"unzip -q -o {archive} -d {C.WORKER_MODEL_DIR}")
        removed = lines.index(f"rm -f {archive}")
        start = lines.index("systemctl enable --now skinflint-worker.service")
        # strict mode first: a failed download fails the boot (ABANDON), as any other command does
        assert strict < download < mkdir < unzip < removed < start, hw
        env = dict(re.findall(r"echo '([A-Z_]+)=([^']*)' >> /etc/skinflint/worker.env", ud))
        assert env["SKINFLINT_MODEL_DIR"] == C.WORKER_MODEL_DIR, hw
    # the agent reads that variable (workers/instance.py _resolver)
    assert 'os.environ.get("SKINFLINT_MODEL_DIR")' in (C.REPO_ROOT / "workers" / "instance.py").read_text()


def test_fleet_output_and_warning_name_what_ships(assembly: Assembly) -> None:
    doc = assembly.template(C.FLEET_STACK)
    shipped = sorted(n.removesuffix(C.MODEL_SUFFIX) for n in FIXTURE_MODELS)
    assert doc["Outputs"]["Models"]["Value"] == ",".join(shipped)
    (missing,) = [w for w in assembly.warnings(C.FLEET_STACK) if "skinflint:models-missing" in w]
    assert "resnet18_face" in missing and "ssdlite_mnv2" not in missing  # the traffic model not built


# -- the models directory from context (no synthesis) ---------------------------------------------------
def test_default_is_the_build_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKINFLINT_CACHE", str(tmp_path))
    with pytest.raises(InfraConfigError) as err:
        models_dir(None)
    msg = str(err.value)
    assert "\n" not in msg and f"no built models in {tmp_path / 'models'}" in msg
    assert "skinflint models build" in msg and "-c models=none" in msg
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "ssdlite_mnv2.onnx.tmp").write_bytes(b"half")  # an interrupted build
    with pytest.raises(InfraConfigError):
        models_dir("")
    (tmp_path / "models" / "ssdlite_mnv2.onnx").write_bytes(b"onnx")
    assert models_dir(None) == tmp_path / "models"


def test_explicit_directory_and_none(tmp_path: Path) -> None:
    assert models_dir("none") is None and models_dir(" NONE ") is None
    (tmp_path / "m.onnx").write_bytes(b"onnx")
    assert models_dir(str(tmp_path)) == tmp_path
    with pytest.raises(InfraConfigError, match="is not a directory"):
        models_dir(str(tmp_path / "m.onnx"))
    with pytest.raises(InfraConfigError, match="no built models in"):
        models_dir(str(tmp_path / "absent"))


def test_app_py_takes_context_arguments() -> None:
    assert _argv_context(["-c", "models=none", "--context=hardware=t4", "-c", "spot=true"]) == {
        "models": "none",
        "hardware": "t4",
        "spot": "true",
    }
    for bad in (["models=none"], ["-c", "models"], ["-c"], ["--spot"]):
        with pytest.raises(InfraConfigError, match="expected -c KEY=VALUE"):
            _argv_context(bad)


def test_app_py_without_models_exits_2_with_one_line(tmp_path: Path) -> None:
    """``python app.py`` (and ``cdk synth``) on a machine where the models were never built."""
    env = {k: v for k, v in os.environ.items() if k != "CDK_CONTEXT_JSON"}
    env["SKINFLINT_CACHE"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "app.py"],
        cwd=C.REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(
        f"skinflint cdk: no built models in {tmp_path / 'models'}: run `skinflint models build`"
    )
