"""Profile store adapters: local directory, layered, and S3 (moto)."""

import json

import pytest

from planner.models import AppModuleSpec, AppSpec, ProfileEntry
from profiles.errors import StoreError
from profiles.store import PACKAGE_ROOT, LayeredStore, LocalStore, ProfileStore

ENTRY = {"hardware": "c6i.large", "batch": 2, "concurrency": 1, "duration_s": 0.01, "source": "measured"}


def _exercise(store: ProfileStore):
    """The same round trip on any adapter."""
    src = LocalStore(PACKAGE_ROOT)
    store.save_catalog(src.load_catalog())
    assert store.load_catalog() == src.load_catalog()
    app = AppSpec(name="mini", slo_s=0.2, modules={"a": AppModuleSpec(model="m1")})
    store.save_app(app)
    assert store.list_apps() == ["mini"]
    assert store.load_app("mini") == app
    store.save_profile("m1", [ENTRY])
    assert store.list_models() == ["m1"]
    (entry,) = store.load_profile("m1")
    assert entry == ProfileEntry.model_validate(ENTRY)
    assert (entry.model_extra or {})["source"] == "measured"  # provenance survives the round trip
    with pytest.raises(StoreError, match="no application 'nope'"):
        store.load_app("nope")
    with pytest.raises(StoreError, match="data/missing.json not found"):
        store.load_profile("missing")


def test_local_store_round_trip(tmp_path):
    _exercise(LocalStore(tmp_path))
    assert json.loads((tmp_path / "data" / "m1.json").read_text()) == [ENTRY]


def test_local_store_rejects_bad_files(tmp_path):
    store = LocalStore(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "bad.json").write_text("{not json")
    with pytest.raises(StoreError, match="not valid JSON"):
        store.load_profile("bad")
    (tmp_path / "data" / "neg.json").write_text(json.dumps([dict(ENTRY, duration_s=-1)]))
    with pytest.raises(StoreError, match="invalid profile entry"):
        store.load_profile("neg")
    with pytest.raises(ValueError):
        store.save_profile("x", [dict(ENTRY, batch=0)])  # never writes what the planner cannot read


def test_yaml_app_spec(tmp_path):
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "y.yaml").write_text(
        "name: y\nslo_s: 0.3\nmodules:\n  a: {model: m}\n  b: {model: m}\nedges:\n  - [a, b, 2]\n"
    )
    app = LocalStore(tmp_path).load_app("y")
    assert app.module_rates(10) == {"a": 10, "b": 20.0}


def test_layered_store_reads_first_layer_with_the_key(tmp_path):
    top = LocalStore(tmp_path)
    store = LayeredStore([top, LocalStore(PACKAGE_ROOT)])
    assert "traffic" in store.list_apps()  # from the package
    store.save_profile("ssdlite_mnv2", [ENTRY])  # written to the top layer
    assert (tmp_path / "data" / "ssdlite_mnv2.json").is_file()
    assert len(store.load_profile("ssdlite_mnv2")) == 1


@pytest.fixture
def aws_credentials(monkeypatch):
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(k, v)


@pytest.mark.functional
def test_s3_store_round_trip(aws_credentials):
    boto3 = pytest.importorskip("boto3")
    from moto import mock_aws

    from profiles.s3store import S3Store

    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="skinflint-profiles")
        store = S3Store(client, "skinflint-profiles", prefix="v1")
        _exercise(store)
        assert client.head_object(Bucket="skinflint-profiles", Key="v1/data/m1.json")
        # upload the packaged store and build a problem from S3
        s3 = S3Store(client, "skinflint-profiles", prefix="pkg")
        s3.upload_from(LocalStore(PACKAGE_ROOT))
        assert s3.list_apps() == LocalStore(PACKAGE_ROOT).list_apps()


@pytest.mark.functional
def test_s3_errors_become_store_errors(aws_credentials):
    boto3 = pytest.importorskip("boto3")
    from moto import mock_aws

    from profiles.s3store import S3Store

    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        store = S3Store(client, "no-such-bucket")
        with pytest.raises(StoreError, match="s3://no-such-bucket/"):
            store.load_catalog()


def test_importing_profiles_is_lean():
    import subprocess
    import sys

    code = (
        "import sys, profiles, profiles.store, profiles.hardware; "
        "print(sorted(m for m in ('boto3', 'torch', 'onnxruntime') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
