"""Names and sizes of the deployed system, in one place (units in the comments).

Resource names that the data plane also uses (``core/settings.py`` defaults, the queue-name
prefix of ``control/queues.py``) are spelled here once and passed to the code as
environment variables, never re-typed in a stack.
"""

from __future__ import annotations

from pathlib import Path

# -- the repository ---------------------------------------------------------------------------------
REPO_ROOT = Path(__file__).resolve().parent.parent
CATALOG_PATH = REPO_ROOT / "profiles" / "hardware.json"  # the hardware catalog (contract data file)
# Source packages shipped to Lambda and to the workers (copied, never pip-installed). The functions
# need ``profiles`` for the packaged catalog and the S3 profile store (control/service.py); the
# workers ``control`` for the app registry they read (control/registration/store.py).
LAMBDA_PACKAGES = ("functions", "front", "control", "core", "planner", "profiles")
WORKER_PACKAGES = ("core", "control", "planner", "workers", "profiles")
STAGING_DIR = REPO_ROOT / "build" / "cdk-staging"  # created at synth time; under build/ (git-ignored)
LAMBDA_DEPS_DIR = REPO_ROOT / "build" / "lambda-deps"  # `python -m cdk.deps lambda` fills python/
WORKER_WHEELS_DIR = REPO_ROOT / "build" / "worker-wheels"  # `python -m cdk.deps worker` fills it

# -- stacks -----------------------------------------------------------------------------------------
STACK_PREFIX = "Skinflint"
STATEFUL_STACK = f"{STACK_PREFIX}-Stateful"
FLEET_STACK = f"{STACK_PREFIX}-Fleet"
CONTROL_STACK = f"{STACK_PREFIX}-Control"
FRONT_STACK = f"{STACK_PREFIX}-Front"
OBSERVABILITY_STACK = f"{STACK_PREFIX}-Observability"
ALL_STACKS = (STATEFUL_STACK, FLEET_STACK, CONTROL_STACK, FRONT_STACK, OBSERVABILITY_STACK)

# -- stateful resources -----------------------------------------------------------------------------
CONFIG_TABLE_NAME = "skinflint-config"  # plan versions, hashed API keys, control state, app registry (pk)
RESULTS_TABLE_NAME = "skinflint-results"  # per-request task records (pk, sk)
RESULTS_TTL_ATTRIBUTE = "expires_at"  # epoch s (core.adapters.results.EXPIRES_AT); DynamoDB's TTL
QUEUE_NAME_PREFIX = "skinflint-"  # task queues are created at run time as skinflint-{app}-...
TASKS_DLQ_NAME = "skinflint-tasks-dlq"  # shared DLQ for the run-time task queues
FLEET_EVENTS_QUEUE_NAME = "skinflint-fleet-events"  # ASG lifecycle + Spot notices -> planner
FLEET_EVENTS_DLQ_NAME = "skinflint-fleet-events-dlq"
# The CDK-owned queues share the task queues' prefix: roles granted "skinflint-*" are denied these.
CDK_QUEUE_NAMES = (TASKS_DLQ_NAME, FLEET_EVENTS_QUEUE_NAME, FLEET_EVENTS_DLQ_NAME)
QUEUE_RETENTION_DAYS = 14  # days: DLQs keep messages this long (the SQS maximum)
FLEET_EVENTS_RETENTION_HOURS = 4  # h: a fleet event older than this is stale
FLEET_EVENTS_VISIBILITY_S = 300  # s: AWS advises 6x the consuming function's timeout (6 x 50 s)
MAX_RECEIVE_COUNT = 5  # receives before a message goes to its DLQ
FRAMES_EXPIRE_DAYS = 1  # days: frames spilled to S3 (payloads > 200 KiB) are transient
# days: a request's items in the results table (SKINFLINT_RESULTS_RETENTION_DAYS of the front and the
# workers: every item carries expires_at, the table's TTL attribute) and its large outputs in S3
RESULTS_RETENTION_DAYS = 7
OUTPUTS_EXPIRE_DAYS = (
    RESULTS_RETENTION_DAYS  # days: large task outputs under outputs/ (task items point at them)
)
ACCESS_LOGS_EXPIRE_DAYS = 90  # days: S3 server access logs
ABORT_MULTIPART_DAYS = 1  # days
FRAMES_BUCKET_PREFIX = "skinflint-frames"  # + -<account>-<region>: a predictable name and literal ARNs
FRAMES_PREFIX = "frames/"  # frames over the SQS size limit (front writes, workers read); crops too (workers)
OUTPUTS_PREFIX = "outputs/"  # task outputs too large for DynamoDB (workers write)
REGISTRY_PREFIX = "registry/"  # registered app specs (control/registration/store.py: registry/apps/...)
PROFILES_PREFIX = "profiles/"  # catalog override and shared profiles (control/service.py)
# Config-table keys (pk) each writer may write, as dynamodb:LeadingKeys patterns:
WORKER_CONFIG_KEYS = ("plan#v*#claim#*", "instance#*")  # slot claims, heartbeats (plan_store.py)
FRONT_CONFIG_KEYS = ("appspec#*", "control#replan")  # app index, planning request (registry.py)
# Results-table keys (pk) the front may update: the shared batch-slot counts (core/adapters/slots.py)
FRONT_RESULTS_UPDATE_KEYS = ("slot#*",)

# -- Lambda -----------------------------------------------------------------------------------------
LAMBDA_PYTHON = "3.13"  # runtime of both functions (and of the dependency layer's wheels)
FRONT_HANDLER = "functions.front.handler"
PLANNER_HANDLER = "functions.planner.handler"  # functions/planner.py: handler
PLANNER_FUNCTION_NAME = "skinflint-planner"  # fixed: the front invokes it by name (no export)
FRONT_MEMORY_MB = 1024  # MB: more memory = more CPU = shorter FastAPI cold start
FRONT_TIMEOUT_S = 29  # s: API Gateway's integration timeout is 29-30 s
PLANNER_MEMORY_MB = 1024  # MB
PLANNER_TIMEOUT_S = 50  # s: below the 60 s epoch so two runs never overlap
# Epochs serialise on the conditional write of control#state (a second concurrent epoch is skipped)
# and the plan pointer flips conditionally, so concurrent invocations are safe. What a deployment
# reserves with -c planner_concurrency (cdk/limits.py puts it in every plan's cdk_context): room for
# the epoch schedule, the backlog-check schedule and FLEET_EVENTS_CONCURRENCY fleet-event batches, so
# none throttles another. Unreserved by default (a new account's limit of 10 leaves nothing to
# reserve); the functions then share the account's pool.
PLANNER_RESERVED_CONCURRENCY = 4  # concurrent executions
FLEET_EVENTS_CONCURRENCY = 2  # SQS event source maximum concurrency (2 is the minimum allowed)
FLEET_EVENTS_BATCH = 10  # fleet-event records per invocation
PLANNER_EPOCH_S = 60  # s: EventBridge schedule rate(1 minute)
# s: the workers' batch-closing grace (workers.worker.Worker.grace_s), planned as latency on top of each
# module's hop, the cold-start default or a measured delivery p99 (control/config.py batch_overhead_s);
# the planner and the front's registration plan with the same figure
BATCH_OVERHEAD_S = 0.02
PLANNER_QUEUE_WORKERS = 16  # apps whose queues are created in parallel (SKINFLINT_QUEUE_WORKERS)
# s the planner's rate window ends before now (SKINFLINT_RATE_LAG_S; the code's default is 5 s, the
# writers' flush interval): on AWS a value is readable only once CloudWatch has ingested it, and the
# front's values come through its log group (Embedded Metric Format), which AWS does not bound. A
# judgement, not a measurement (no AWS account here): a period read before all of it has arrived
# under-counts the rate and the plan under-provisions; each second of lag delays a ramp by as much.
PLANNER_RATE_LAG_S = 30
LOG_RETENTION_DAYS = 30  # days for every log group
POWERTOOLS_ACCOUNT = "017000801446"  # AWS account publishing the Powertools layers
POWERTOOLS_LAYER_VERSION = 27  # AWSLambdaPowertoolsPythonV3-python313-x86_64:27; -c powertools_layer_version
METRICS_NAMESPACE = "Skinflint"  # CloudWatch namespace of the data plane's metrics
SERVICE_NAME = "skinflint"

# -- API --------------------------------------------------------------------------------------------
# -c front_api: "http" (default), an HTTP API whose $default stage routes everything to the front,
# which checks the key itself; "rest", the REST API with API keys, a usage plan and a WAF web ACL
FRONT_API_HTTP, FRONT_API_REST = "http", "rest"
FRONT_APIS = (FRONT_API_HTTP, FRONT_API_REST)
API_STAGE = "live"  # the REST API's stage path segment; the app's own routes start with /v1
API_RATE_LIMIT_RPS = 500  # requests/s steady state, per stage (both APIs) and per usage-plan key
API_BURST = 1000  # requests
API_QUOTA_PER_DAY = 5_000_000  # requests per key per day
WAF_RATE_LIMIT_PER_5MIN = 30_000  # requests per client IP per 5 minutes (WAF's fixed window)
API_KEY_NAME = "skinflint-default"
USAGE_PLAN_NAME = "skinflint-default"

# -- fleet ------------------------------------------------------------------------------------------
VPC_CIDR = "10.42.0.0/16"
MAX_AZS = 2  # availability zones: 2 for Spot capacity; every interface endpoint costs per AZ-hour
PRIVATE_SUBNET_MASK = 20  # /20 = 4,091 addresses per AZ
ASG_NAME_PREFIX = "skinflint-workers-"  # + hardware class (dots -> dashes)
ASG_MAX_INSTANCES = 10  # instances per hardware class; the planner sets the desired count
ROOT_VOLUME_GIB = 100  # GiB gp3: the DLAMI needs ~75 GiB
DRAIN_HOOK_NAME = "skinflint-drain"
# The launch hook: an instance stays Pending:Wait until its user data completes it (CONTINUE once the
# agent runs, ABANDON on any boot failure); one that never completes is abandoned after this many s
# (dnf, unzip and an offline pip install of a ~300 MB wheelhouse take minutes, an estimate).
BOOT_HOOK_NAME = "skinflint-boot"
BOOT_HEARTBEAT_S = 1200
BOOT_CHECK_EXIT = 3  # python -m workers.instance: the boot check failed (the instance is marked unhealthy)
BOOT_FAILURES_METRIC = "BootFailures"  # metric filter on the worker log group (cdk/userdata.py)
# s: lifecycle hook heartbeat timeout. A drain takes a 1 s long poll + the batch in hand + releases,
# each share's thread joined within 60 s (workers/agent.py); systemd kills a stuck agent at
# half this, and the agent assumes this deadline (workers/lifecycle.py LifecycleWatcher).
DRAIN_HEARTBEAT_S = 300
DRAIN_POLL_S = 5  # s between IMDS target-lifecycle-state reads on the instance
WORKER_LOG_GROUP = "/skinflint/workers"
# CPython of the workers' venv: the GPU AMI's own /usr/bin/python3.12 (DLAMI release notes,
# python_location) and AL2023's python3.12 package on the CPU AMI (AL2023's system python3 stays 3.9);
# the wheelhouses are built for it (python -m cdk.deps worker). docs/deploy.md cites both.
WORKER_PYTHON = "3.12"
WORKER_USER = "skinflint"
WORKER_LOG_MAX_MB = 200  # MB: worker.log is rotated (logrotate, copytruncate) past this or daily, 3 kept
WORKER_METRICS_RESOLUTION_S = 60  # s: the instances' metric buckets (SKINFLINT_METRICS_RESOLUTION_S)
WORKER_MODEL_DIR = "/opt/skinflint/models"  # the models archive, unzipped (SKINFLINT_MODEL_DIR)
MODEL_SUFFIX = ".onnx"  # only these files of the models directory ship (the agent loads <model>.onnx)
# Public SSM parameters of the AMIs (resolved by CloudFormation at deploy time, no synth-time lookup)
GPU_AMI_PARAMETER = (
    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id"
)
CPU_AMI_PARAMETER = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
# Instance families the GPU AMI cannot drive: it ships NVIDIA's open kernel modules, which support
# Turing (T4) and later only, not Volta (P3: V100), Pascal or Maxwell (docs/deploy.md cites both).
GPU_AMI_UNSUPPORTED_FAMILIES = ("p2", "p3", "p3dn", "g3", "g3s")
FLOW_LOG_RETENTION_DAYS = 30  # days

# -- dependencies (what the layer and the worker wheelhouse contain) --------------------------------
# pyyaml: POST /v1/apps accepts YAML specs (control/spec.py parse_spec_text)
LAMBDA_REQUIREMENTS = ("fastapi>=0.110", "mangum>=0.17", "pydantic>=2.6,<3", "numpy>=1.26", "pyyaml>=6")
WORKER_REQUIREMENTS = ("numpy>=1.26", "pydantic>=2.6,<3", "boto3>=1.34", "pillow>=10")
# onnxruntime-gpu < 1.27: 1.26.0's CUDA provider links libcudart.so.12/libcublas.so.12, 1.27.0's
# libcudart.so.13 (readelf -d on the PyPI wheels); CUDA 13 dropped Volta (V100), CUDA 12 serves T4 and V100.
# The CUDA 12 and cuDNN 9 libraries come from the GPU AMI (/usr/local/cuda-12.*), not from pip.
WORKER_RUNTIME = {"cpu": "onnxruntime>=1.18", "gpu": "onnxruntime-gpu>=1.18,<1.27"}

# -- observability ----------------------------------------------------------------------------------
DASHBOARD_NAME = "skinflint"
ALARM_PERIOD_S = 60  # s
QUEUE_AGE_ALARM_S = 30  # s: an oldest message older than this cannot meet any video SLO
COST_PERIOD_S = 300  # s: period of the cost widgets (InstanceSeconds summed over it)
SLO_ATTAINMENT_ALARM = 0.99  # fraction of an app's frames within its SLO (alarm below)
CARRIED_APPS_METRIC = "CarriedApps"  # apps on a plan carried over a problem change (control/epoch.py)
CARRIED_ALARM_MINUTES = 30  # apps still carried this long: the planner's solve budget is too small
SHED_TARGET_UNMET_METRIC = "ShedTargetUnmet"  # apps whose shed_target no reserve meets (control/epoch.py)
SHED_TARGET_ALARM_MINUTES = 15  # an unmet shed_target stands this long: the app needs a longer SLO or target
SLO_PERIOD_S = 300  # s: period of the SLO alarm (a few frames per minute would make 1 min noisy)
# Metric names the code emits (namespace METRICS_NAMESPACE); tests/infra checks each against the code.
SLO_ATTAINMENT_METRIC = "SloAttainment"  # App; 0/1 per finished frame (core/adapters/outcomes.py)
INSTANCE_SECONDS_METRIC = "InstanceSeconds"  # Hardware, State: workers/agent.py
PLANNING_FAILURES_METRIC = "PlanningFailures"  # no dimension: 1 failed epoch, 0 otherwise (control/epoch.py)


def frames_bucket_name(account: str, region: str) -> str:
    """The frames bucket's name (S3 names are global: account and region make it unique)."""
    return f"{FRAMES_BUCKET_PREFIX}-{account}-{region}"


def frames_bucket_arn(partition: str, account: str, region: str, key_pattern: str = "") -> str:
    arn = f"arn:{partition}:s3:::{frames_bucket_name(account, region)}"
    return f"{arn}/{key_pattern}" if key_pattern else arn
