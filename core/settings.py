"""Settings of the data plane, read from the environment once (handlers and workers pass them on)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "DEFAULT_DELETE_LINGER_S",
    "DEFAULT_RESULTS_RETENTION_DAYS",
    "DELETE_BATCH",
    "METRICS_SINKS",
    "DataPlaneConfig",
    "delete_linger_from_env",
    "seconds_from_env",
    "resource_name_problem",
    "results_retention_from_env",
    "undeleted_bound",
    "usage_metering_from_env",
]

# SQS's message size limit is 256 KiB; frames whose message would exceed this go to S3.
SQS_INLINE_LIMIT_BYTES = 200 * 1024  # bytes of base64 payload kept inline (envelope fits in the rest)
MAX_BODY_BYTES = 6 * 1024 * 1024  # bytes: Lambda's synchronous payload limit

#: s a processed message's delete may wait to share a DeleteMessageBatch (workers.worker; the
#: control loop's backlog check allows for the messages it keeps in flight meanwhile). At batch size 1
#: (the demo's 4 frames/s) every batch used to send its own delete: SQS bills a batch request as one.
DEFAULT_DELETE_LINGER_S = 1.0
DELETE_BATCH = 10  # SQS's DeleteMessageBatch limit
#: where a component's metrics go (SKINFLINT_METRICS_SINK): PutMetricData, or EMF log lines
METRICS_SINKS = ("cloudwatch", "emf")


def seconds_from_env(env: Mapping[str, str] | None, name: str, default: float, most: float) -> float:
    """The setting ``name`` as seconds within [0, ``most``], ``default`` when unset or empty. Raises
    ValueError naming the setting on anything else (NaN included)."""
    raw = (os.environ if env is None else env).get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not 0 <= value <= most:
        raise ValueError(f"{name} must be within [0, {most:g}] s, got {raw!r}")
    return value


def delete_linger_from_env(env: Mapping[str, str] | None = None) -> float:
    """``SKINFLINT_DELETE_LINGER_S`` (0-10 s; 0 deletes at once), else :data:`DEFAULT_DELETE_LINGER_S`.
    Raises ValueError with the setting's name on anything else."""
    return seconds_from_env(env, "SKINFLINT_DELETE_LINGER_S", DEFAULT_DELETE_LINGER_S, 10.0)


#: days a request's items stay in the results table (its frame, task and outcome items carry an
#: ``expires_at`` of write time + this; DynamoDB's TTL deletes them some time after). The CDK stacks use
#: the same figure for the S3 lifecycle of large task outputs, which the task items point at.
#: The most pixels a frame may have (the front's default ``ImageLimits.max_pixels``, 4096 x 4096) and the
#: most a worker decodes (``SKINFLINT_WORKER_MAX_PIXELS``): a frame that reached a queue without the
#: front's check (a stranded message moved, a message sent by hand) is refused before it is decoded.
DEFAULT_MAX_PIXELS = 16_777_216


def worker_max_pixels_from_env(env: Mapping[str, str] | None = None) -> int:
    """``SKINFLINT_WORKER_MAX_PIXELS`` (default :data:`DEFAULT_MAX_PIXELS`); a bad value raises ValueError."""
    raw = (os.environ if env is None else env).get("SKINFLINT_WORKER_MAX_PIXELS")
    if raw is None or raw == "":
        return DEFAULT_MAX_PIXELS
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(
            f"SKINFLINT_WORKER_MAX_PIXELS must be a whole number of pixels, got {raw!r}"
        ) from None
    if value < 1:
        raise ValueError(f"SKINFLINT_WORKER_MAX_PIXELS must be >= 1, got {value}")
    return value


def front_api_from_env(env: Mapping[str, str] | None = None) -> str:
    """``SKINFLINT_FRONT_API``: the API Gateway the front runs behind, ``http`` (the default, and the
    local stack's stand-in) or ``rest`` (``-c front_api=rest``); what its requests are priced as."""
    raw = ((os.environ if env is None else env).get("SKINFLINT_FRONT_API") or "http").strip().lower()
    if raw not in ("http", "rest"):
        raise ValueError(f"SKINFLINT_FRONT_API must be http or rest, got {raw!r}")
    return raw


DEFAULT_RESULTS_RETENTION_DAYS = 7.0
_MAX_RESULTS_RETENTION_DAYS = 365.0


def results_retention_from_env(env: Mapping[str, str] | None = None) -> float:
    """``SKINFLINT_RESULTS_RETENTION_DAYS`` (a number of days in (0, 365]), else
    :data:`DEFAULT_RESULTS_RETENTION_DAYS`. Raises ValueError with the setting's name on anything else."""
    raw = (os.environ if env is None else env).get("SKINFLINT_RESULTS_RETENTION_DAYS")
    if raw is None or not raw.strip():
        return DEFAULT_RESULTS_RETENTION_DAYS
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"SKINFLINT_RESULTS_RETENTION_DAYS must be a number of days, got {raw!r}") from None
    if not 0 < value <= _MAX_RESULTS_RETENTION_DAYS:
        raise ValueError(
            f"SKINFLINT_RESULTS_RETENTION_DAYS must be within (0, {_MAX_RESULTS_RETENTION_DAYS:g}] days, "
            f"got {raw!r}"
        )
    return value


def undeleted_bound(rate: float, linger_s: float, tasks_per_message: float = 1.0) -> float:
    """How many processed requests (tasks) a machine's queue may still hold in flight because their
    message's delete lingers: those processed within the last ``1.25 x linger_s`` (a worker's
    flusher looks every quarter linger) at the machine's rate (tasks/s), and never the tasks of a
    full DeleteMessageBatch (ten messages go out at once; a message carries ``tasks_per_message``
    tasks on average, core/wire.py)."""
    if linger_s <= 0:
        return 0.0
    return min((DELETE_BATCH - 1.0) * max(1.0, tasks_per_message), rate * 1.25 * linger_s)


#: ``SKINFLINT_USAGE_METERING``: ``on`` (the default) counts the AWS requests of every client
#: ``core.clients.make_client`` makes for a component, and the units AWS bills them by, and publishes
#: them with the component's metrics (``AwsRequests``, ``AwsRequestUnits``: core/adapters/usage.py,
#: the data plane's part of ``skinflint report``); ``off`` makes no hook and publishes nothing (the
#: metrics are custom metrics CloudWatch bills per month, and each flush with them is one more
#: PutMetricData).
_USAGE_METERING = {"on": True, "1": True, "true": True, "off": False, "0": False, "false": False}


def usage_metering_from_env(env: Mapping[str, str] | None = None) -> bool:
    """``SKINFLINT_USAGE_METERING`` (on/off, 1/0, true/false; default on). Raises ValueError with the
    setting's name on anything else."""
    raw = (os.environ if env is None else env).get("SKINFLINT_USAGE_METERING")
    if raw is None or not raw.strip():
        return True
    try:
        return _USAGE_METERING[raw.strip().lower()]
    except KeyError:
        raise ValueError(f"SKINFLINT_USAGE_METERING must be on or off, got {_shown(raw)}") from None


# -- the AWS resource names a deployment configures --------------------------------------------------
# Checked where a DataPlaneConfig is built, by AWS's documented naming rules, so a malformed name is one
# line naming its setting (the CLI's UsageError, the front's 503, a worker's ConfigError) rather than
# botocore's ParamValidationError or an opaque error answer at the first call.

_BUCKET_CHARS = re.compile(r"[a-z0-9.-]+")
_IPV4_LIKE = re.compile(r"\d+\.\d+\.\d+\.\d+")
#: S3 reserves these for its own names (punycode, internal, documentation examples) ...
_BUCKET_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
#: ... and these for access point, Object Lambda and Multi-Region aliases, directory and table buckets
_BUCKET_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
_TABLE_CHARS = re.compile(r"[A-Za-z0-9_.-]+")
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]+")


def _first_broken(checks: tuple[tuple[bool, str], ...]) -> str | None:
    return next((rule for ok, rule in checks if not ok), None)


def _bucket_problem(name: str) -> str | None:
    """The S3 general purpose bucket naming rule ``name`` breaks (the S3 User Guide's list), or None."""
    prefix = next((reserved for reserved in _BUCKET_RESERVED_PREFIXES if name.startswith(reserved)), None)
    suffix = next((reserved for reserved in _BUCKET_RESERVED_SUFFIXES if name.endswith(reserved)), None)
    return _first_broken(
        (
            (3 <= len(name) <= 63, "3-63 characters"),
            (_BUCKET_CHARS.fullmatch(name) is not None, "lower-case letters, digits, dots and hyphens only"),
            (name[:1].isalnum() and name[-1:].isalnum(), "beginning and ending with a letter or digit"),
            (".." not in name, "no two adjacent dots"),
            (_IPV4_LIKE.fullmatch(name) is None, "not formatted as an IP address"),
            (prefix is None, f"not beginning with {prefix!r}, which S3 reserves"),
            (suffix is None, f"not ending with {suffix!r}, which S3 reserves"),
        )
    )


def _table_problem(name: str) -> str | None:
    """The DynamoDB table naming rule ``name`` breaks, or None."""
    return _first_broken(
        (
            (3 <= len(name) <= 255, "3-255 characters"),
            (_TABLE_CHARS.fullmatch(name) is not None, "letters, digits, '_', '-' and '.' only"),
        )
    )


def _namespace_problem(name: str) -> str | None:
    """The rule of CloudWatch's PutMetricData ``Namespace`` that ``name`` breaks, or None."""
    return _first_broken(
        (
            (1 <= len(name) <= 255, "1-255 characters"),
            (_PRINTABLE_ASCII.fullmatch(name) is not None, "printable ASCII characters only"),
            (bool(name.strip()), "at least one character other than a space"),
            (not name.startswith(":"), "not beginning with ':'"),
            (not name.startswith("AWS/"), "not beginning with 'AWS/', which AWS's own services use"),
        )
    )


_RULES = {
    "bucket": ("an S3 bucket name", _bucket_problem),
    "table": ("a DynamoDB table name", _table_problem),
    "namespace": ("a CloudWatch namespace", _namespace_problem),
}


def resource_name_problem(kind: str, name: str) -> str | None:
    """Why ``name`` is not a valid AWS name of ``kind`` (``bucket``, ``table`` or ``namespace``), as
    one phrase (``"an S3 bucket name (3-63 characters)"``), or None when it is valid."""
    what, problem = _RULES[kind]
    broken = problem(name)
    return None if broken is None else f"{what} ({broken})"


def _shown(value: str) -> str:
    """``value`` quoted for a one-line message, cut short when long."""
    shown = repr(value)
    return shown if len(shown) <= 80 else f"{shown[:60]}... ({len(value)} characters)"


#: DataPlaneConfig's resource names: field, the setting that carries it (from_env, to_env), its kind
_NAMED_RESOURCES = (
    ("config_table", "SKINFLINT_CONFIG_TABLE", "table"),
    ("results_table", "SKINFLINT_RESULTS_TABLE", "table"),
    ("bucket", "SKINFLINT_BUCKET", "bucket"),
    ("metrics_namespace", "SKINFLINT_METRICS_NAMESPACE", "namespace"),
)


def _int_setting(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number of bytes, got {_shown(raw)}") from None


@dataclass(frozen=True)
class DataPlaneConfig:
    """Names of the resources and the endpoint (``endpoint_url`` is moto's server locally)."""

    region: str = "us-east-1"
    endpoint_url: str | None = None
    config_table: str = "skinflint-config"
    results_table: str = "skinflint-results"
    bucket: str = "skinflint-frames"
    metrics_namespace: str = "Skinflint"
    inline_limit_bytes: int = SQS_INLINE_LIMIT_BYTES
    max_body_bytes: int = MAX_BODY_BYTES
    output_inline_limit_bytes: int = 64 * 1024  # task outputs larger than this go to S3
    results_retention_days: float = DEFAULT_RESULTS_RETENTION_DAYS  # then the results' items expire
    extra: dict[str, str] = field(default_factory=dict)
    usage_metering: bool = True  # SKINFLINT_USAGE_METERING: count the components' AWS requests
    # SKINFLINT_METRICS_SINK: "cloudwatch" (PutMetricData) or "emf" (Embedded Metric Format lines on
    # stdout, or appended to SKINFLINT_EMF_FILE, which CloudWatch Logs extracts: core.clients.make_metrics)
    metrics_sink: str = "cloudwatch"
    emf_file: str | None = None

    def __post_init__(self) -> None:
        """Every resource name must be valid by AWS's naming rules: raises ValueError naming the
        setting that carries it (``SKINFLINT_BUCKET must be an S3 bucket name (...), got '...'``)."""
        for attr, setting, kind in _NAMED_RESOURCES:
            value = getattr(self, attr)
            broken = resource_name_problem(kind, value)
            if broken is not None:
                raise ValueError(f"{setting} must be {broken}, got {_shown(value)}")
        if self.metrics_sink not in METRICS_SINKS:
            allowed, got = ", ".join(METRICS_SINKS), _shown(self.metrics_sink)
            raise ValueError(f"SKINFLINT_METRICS_SINK must be one of {allowed}, got {got}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DataPlaneConfig:
        """The settings in ``env`` (default: the process environment). Raises ValueError naming the
        setting when one is malformed: a resource name AWS would refuse (an empty one too: a set but
        empty variable is a deployment's mistake, never a request for the default name), a byte
        limit that is not a whole number, ``SKINFLINT_RESULTS_RETENTION_DAYS`` not a valid number
        of days, ``SKINFLINT_USAGE_METERING`` neither on nor off."""
        environ = os.environ if env is None else env
        defaults = cls()
        return cls(
            region=environ.get("AWS_DEFAULT_REGION", environ.get("AWS_REGION", defaults.region)),
            endpoint_url=environ.get("SKINFLINT_ENDPOINT_URL") or None,
            config_table=environ.get("SKINFLINT_CONFIG_TABLE", defaults.config_table),
            results_table=environ.get("SKINFLINT_RESULTS_TABLE", defaults.results_table),
            bucket=environ.get("SKINFLINT_BUCKET", defaults.bucket),
            metrics_namespace=environ.get("SKINFLINT_METRICS_NAMESPACE", defaults.metrics_namespace),
            inline_limit_bytes=_int_setting(
                environ, "SKINFLINT_INLINE_LIMIT_BYTES", defaults.inline_limit_bytes
            ),
            max_body_bytes=_int_setting(environ, "SKINFLINT_MAX_BODY_BYTES", defaults.max_body_bytes),
            results_retention_days=results_retention_from_env(environ),
            usage_metering=usage_metering_from_env(environ),
            metrics_sink=environ.get("SKINFLINT_METRICS_SINK", defaults.metrics_sink),
            emf_file=environ.get("SKINFLINT_EMF_FILE") or None,
        )

    @property
    def results_retention_s(self) -> float:
        return self.results_retention_days * 86_400.0

    def to_env(self) -> dict[str, str]:
        env = {
            "AWS_DEFAULT_REGION": self.region,
            "SKINFLINT_CONFIG_TABLE": self.config_table,
            "SKINFLINT_RESULTS_TABLE": self.results_table,
            "SKINFLINT_BUCKET": self.bucket,
            "SKINFLINT_METRICS_NAMESPACE": self.metrics_namespace,
            "SKINFLINT_INLINE_LIMIT_BYTES": str(self.inline_limit_bytes),
            "SKINFLINT_MAX_BODY_BYTES": str(self.max_body_bytes),
            "SKINFLINT_RESULTS_RETENTION_DAYS": repr(float(self.results_retention_days)),
            "SKINFLINT_USAGE_METERING": "on" if self.usage_metering else "off",
            "SKINFLINT_METRICS_SINK": self.metrics_sink,
        }
        if self.endpoint_url:
            env["SKINFLINT_ENDPOINT_URL"] = self.endpoint_url
        if self.emf_file:
            env["SKINFLINT_EMF_FILE"] = self.emf_file
        return env
