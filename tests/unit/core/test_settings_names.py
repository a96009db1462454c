"""The deployment's AWS resource names (``SKINFLINT_BUCKET``, ``SKINFLINT_CONFIG_TABLE``,
``SKINFLINT_RESULTS_TABLE``, ``SKINFLINT_METRICS_NAMESPACE``) are checked where the data plane's
config is built, by AWS's documented naming rules: a malformed one is a ``ValueError`` naming its
setting, in one line (the CLI's usage error, the front's 503), never botocore's
``ParamValidationError`` at the first call. The defaults, the CDK stacks' names and the local
stack's pass."""

from __future__ import annotations

import pytest

from cdk import constants as C
from core.settings import DataPlaneConfig, resource_name_problem

# -- S3 bucket names (S3 User Guide, "General purpose bucket naming rules") -----------------------

GOOD_BUCKETS = [
    "abc",  # 3 characters, the minimum
    "a" * 63,  # the maximum
    "skinflint-frames",
    "skinflint-frames-123456789012-us-east-1",
    "my.bucket.example",
    "0bucket9",  # begins and ends with a digit
    "1.2.3",  # dotted digits, but not four parts: not an IP address
    "xn-ok",  # 'xn-' is not the reserved 'xn--'
    "a-s3aliasx",  # the reserved suffix only at the end
]

BAD_BUCKETS = [
    ("", "3-63 characters"),
    ("ab", "3-63 characters"),
    ("a" * 64, "3-63 characters"),
    ("my bucket", "lower-case letters, digits, dots and hyphens only"),
    ("My-Bucket", "lower-case letters, digits, dots and hyphens only"),
    ("my_bucket", "lower-case letters, digits, dots and hyphens only"),
    ("buck\u00e9t", "lower-case letters, digits, dots and hyphens only"),
    ("bucket\n", "lower-case letters, digits, dots and hyphens only"),
    ("-bucket", "beginning and ending with a letter or digit"),
    ("bucket.", "beginning and ending with a letter or digit"),
    ("my..bucket", "no two adjacent dots"),
    ("192.168.5.4", "not formatted as an IP address"),
    ("xn--bucket", "not beginning with 'xn--'"),
    ("sthree-bucket", "not beginning with 'sthree-'"),
    ("sthree-configurator-x", "not beginning with 'sthree-'"),
    ("amzn-s3-demo-bucket", "not beginning with 'amzn-s3-demo-'"),
    ("bucket-s3alias", "not ending with '-s3alias'"),
    ("bucket--ol-s3", "not ending with '--ol-s3'"),
    ("bucket.mrap", "not ending with '.mrap'"),
    ("bucket--use1-az4--x-s3", "not ending with '--x-s3'"),
    ("bucket--table-s3", "not ending with '--table-s3'"),
]

# -- DynamoDB table names (DynamoDB Developer Guide, "Naming rules") -------------------------------

GOOD_TABLES = ["abc", "a" * 255, "skinflint-config", "Skinflint_Results.v2", "0-9"]

BAD_TABLES = [
    ("", "3-255 characters"),
    ("ab", "3-255 characters"),
    ("a" * 256, "3-255 characters"),
    ("my/table", "letters, digits, '_', '-' and '.' only"),
    ("my table", "letters, digits, '_', '-' and '.' only"),
    ("t\u00e4ble", "letters, digits, '_', '-' and '.' only"),
    ("arn:aws:dynamodb:us-east-1:123456789012:table/t", "letters, digits, '_', '-' and '.' only"),
]

# -- CloudWatch namespaces (PutMetricData: 1-255 ASCII, no control characters, pattern [^:].*) ----

GOOD_NAMESPACES = ["S", "Skinflint", "Skinflint/Prod", "My App #1", "a:b", "aws/lower-case", "n" * 255]

BAD_NAMESPACES = [
    ("", "1-255 characters"),
    ("n" * 256, "1-255 characters"),
    ("Skin\tflint", "printable ASCII characters only"),
    ("Skinflint\n", "printable ASCII characters only"),
    ("Sk\u00eflint", "printable ASCII characters only"),
    ("   ", "at least one character other than a space"),
    (":Skinflint", "not beginning with ':'"),
    ("AWS/EC2", "not beginning with 'AWS/'"),
]


@pytest.mark.parametrize("name", GOOD_BUCKETS)
def test_a_valid_bucket_name_passes(name: str) -> None:
    assert resource_name_problem("bucket", name) is None
    assert DataPlaneConfig.from_env({"SKINFLINT_BUCKET": name}).bucket == name


@pytest.mark.parametrize(("name", "rule"), BAD_BUCKETS)
def test_a_malformed_bucket_name_is_one_line_naming_the_setting_and_the_rule(name: str, rule: str) -> None:
    problem = resource_name_problem("bucket", name)
    assert problem is not None and problem.startswith(f"an S3 bucket name ({rule}"), problem
    with pytest.raises(ValueError) as err:
        DataPlaneConfig.from_env({"SKINFLINT_BUCKET": name})
    message = str(err.value)
    assert message.startswith("SKINFLINT_BUCKET must be an S3 bucket name (") and rule in message, message
    assert "\n" not in message


@pytest.mark.parametrize("name", GOOD_TABLES)
@pytest.mark.parametrize("setting", ["SKINFLINT_CONFIG_TABLE", "SKINFLINT_RESULTS_TABLE"])
def test_a_valid_table_name_passes(setting: str, name: str) -> None:
    assert resource_name_problem("table", name) is None
    cfg = DataPlaneConfig.from_env({setting: name})
    assert name in (cfg.config_table, cfg.results_table)


@pytest.mark.parametrize(("name", "rule"), BAD_TABLES)
@pytest.mark.parametrize("setting", ["SKINFLINT_CONFIG_TABLE", "SKINFLINT_RESULTS_TABLE"])
def test_a_malformed_table_name_is_one_line_naming_the_setting_and_the_rule(
    setting: str, name: str, rule: str
) -> None:
    assert resource_name_problem("table", name) == f"a DynamoDB table name ({rule})"
    with pytest.raises(ValueError) as err:
        DataPlaneConfig.from_env({setting: name})
    message = str(err.value)
    assert message.startswith(f"{setting} must be a DynamoDB table name ({rule}), got "), message
    assert "\n" not in message


@pytest.mark.parametrize("name", GOOD_NAMESPACES)
def test_a_valid_namespace_passes(name: str) -> None:
    assert resource_name_problem("namespace", name) is None
    assert DataPlaneConfig.from_env({"SKINFLINT_METRICS_NAMESPACE": name}).metrics_namespace == name


@pytest.mark.parametrize(("name", "rule"), BAD_NAMESPACES)
def test_a_malformed_namespace_is_one_line_naming_the_setting_and_the_rule(name: str, rule: str) -> None:
    with pytest.raises(ValueError) as err:
        DataPlaneConfig.from_env({"SKINFLINT_METRICS_NAMESPACE": name})
    message = str(err.value)
    assert message.startswith("SKINFLINT_METRICS_NAMESPACE must be a CloudWatch namespace ("), message
    assert rule in message and "\n" not in message


def test_a_long_value_is_shown_cut_short_with_its_length() -> None:
    with pytest.raises(ValueError) as err:
        DataPlaneConfig.from_env({"SKINFLINT_BUCKET": "b" * 5000})
    message = str(err.value)
    assert "(5000 characters)" in message and len(message) < 200, message


def test_an_empty_name_is_an_error_not_the_default() -> None:
    # a set but empty variable is a deployment's mistake (an output that was not filled in): falling
    # back to the default name would send the frames to another bucket, maybe another account's
    with pytest.raises(ValueError, match="^SKINFLINT_BUCKET must be an S3 bucket name"):
        DataPlaneConfig.from_env({"SKINFLINT_BUCKET": ""})


def test_a_config_built_directly_is_checked_too() -> None:
    with pytest.raises(ValueError, match="^SKINFLINT_CONFIG_TABLE must be a DynamoDB table name"):
        DataPlaneConfig(config_table="t")


@pytest.mark.parametrize("setting", ["SKINFLINT_INLINE_LIMIT_BYTES", "SKINFLINT_MAX_BODY_BYTES"])
def test_a_byte_limit_that_is_not_a_whole_number_names_its_setting(setting: str) -> None:
    with pytest.raises(ValueError, match=f"^{setting} must be a whole number of bytes, got '1.5k'$"):
        DataPlaneConfig.from_env({setting: "1.5k"})
    assert DataPlaneConfig.from_env({setting: "1024"}).to_env()[setting] == "1024"


def test_the_defaults_pass_and_survive_the_round_trip_to_the_workers() -> None:
    cfg = DataPlaneConfig.from_env({})
    assert cfg == DataPlaneConfig()
    assert DataPlaneConfig.from_env(cfg.to_env()) == cfg


def test_the_cdk_stacks_names_pass() -> None:
    # the names cdk/stacks/stateful.py gives the tables and the bucket (the stacks pass them to the
    # front, the planner and the workers as SKINFLINT_*), and the namespace they pass and pin in IAM
    assert resource_name_problem("table", C.CONFIG_TABLE_NAME) is None
    assert resource_name_problem("table", C.RESULTS_TABLE_NAME) is None
    assert resource_name_problem("namespace", C.METRICS_NAMESPACE) is None
    # the bucket: prefix-account-region; 12-digit accounts, the longest region names (14 characters)
    for region in ("us-east-1", "ap-southeast-4", "cn-northwest-1", "us-gov-west-1"):
        name = C.frames_bucket_name("123456789012", region)
        assert resource_name_problem("bucket", name) is None, name
    # and the defaults are the stacks' names: the CLI finds a deployment with no settings
    d = DataPlaneConfig()
    assert (d.config_table, d.results_table, d.metrics_namespace) == (
        C.CONFIG_TABLE_NAME,
        C.RESULTS_TABLE_NAME,
        C.METRICS_NAMESPACE,
    )


def test_the_local_stacks_names_pass_through_its_childrens_environment() -> None:
    # skinflint/local/stack.py: the default names, moto's endpoint and the run's retention; the
    # front and the workers it spawns read them back with from_env
    cfg = DataPlaneConfig(endpoint_url="http://127.0.0.1:5000", results_retention_days=600 / 86_400)
    assert DataPlaneConfig.from_env(cfg.to_env()) == cfg


def test_the_front_answers_503_with_the_reason_in_its_log(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from fastapi.testclient import TestClient

    from front.app import create_app
    from front.wiring import service_from_config

    monkeypatch.setenv("SKINFLINT_BUCKET", "Frames Bucket")
    client = TestClient(create_app(lambda: service_from_config(background_metrics=False)))
    r = client.get("/v1/requests/0123456789abcdef0123456789abcdef", headers={"x-api-key": "k"})
    assert (r.status_code, r.json()["error"]) == (503, "unavailable")
    assert "SKINFLINT_BUCKET must be an S3 bucket name" in caplog.text


def test_the_instance_agent_refuses_a_bad_name_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from workers.instance import main

    monkeypatch.setenv("SKINFLINT_BUCKET", "My Bucket")
    assert main(["--hardware", "t4", "--instance-id", "i-0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("instance: SKINFLINT_BUCKET must be an S3 bucket name")
