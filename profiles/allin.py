"""The all-in bill of a planned app: the EC2 fleet plus the data plane's AWS requests, storage and fixed
costs at the planned rates (docs/cost.md). Pure: no AWS, no clock, no environment; the prices come from
:class:`~profiles.aws_prices.AwsPrices` (``profiles/aws_prices.json``, each with its date and source).

A data plane is described by a :class:`DataPlanePolicy`: every request it makes per POST, per frame, per
task and per batch is a named field, so the model can be audited against the code. Two policies:

- :data:`TODAY`: the design as the code is (front/service.py, workers/worker.py, core/adapters/*.py,
  docs/dataplane.md): a POST per frame behind a REST API and WAF, a frame item, a slot-count update per
  root module, one SQS message per task carrying the whole frame inline, a conditional ``PutItem`` per
  task, consistent outcome reads by the leaves and an outcome claim per frame;
- :data:`BATCHED`: the target of issue #25: N frames per POST behind an HTTP API (the front checks the
  key), frames carried once (inline in the root message, or one S3 object per POST above SQS's size
  limit), one child message per parent batch and child module carrying crops and the parent's results,
  no per-task writes, one result record per leaf batch, completion by counts (metrics).

The model's three kinds of terms: per POST and per frame (the front), per task (the bytes a task's
message carries; per-task writes) and per batch (receive, delete and child-send calls, the result
record; :func:`batch_usd` prices one batch). The per-batch terms scale with rate / batch, so batch
sizes trade device time against requests: ``skinflint plan --objective all-in`` (control/preview.py)
picks the plan of least fleet + data plane among batch floors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping

    from profiles.aws_prices import AwsPrices

__all__ = [
    "BATCHED",
    "POLICIES",
    "SERVICES",
    "TODAY",
    "AllInError",
    "DataPlaneBill",
    "DataPlanePolicy",
    "ModuleLoad",
    "Workload",
    "batch_usd",
    "data_plane_bill",
    "policy_named",
    "workload_from_plan",
]

KB = 1024
GB = 1024**3
SQS_CHUNK_BYTES = 64 * KB  # SQS bills each 64 KB chunk of a request's payload as one request
SQS_MAX_MESSAGE_BYTES = 256 * KB  # a message, and a SendMessageBatch request, at most
SQS_MAX_ENTRIES = 10  # messages per SendMessageBatch / ReceiveMessage / DeleteMessageBatch
DDB_WRITE_UNIT_BYTES = 1 * KB  # a write request unit: up to 1 KB of item
DDB_READ_UNIT_BYTES = 4 * KB  # a strongly consistent read unit: up to 4 KB
HTTP_API_METER_BYTES = 512 * KB  # an HTTP API request is metered per 512 KB of payload
HOURS_PER_MONTH = 730.0  # AWS's convention for monthly prices
BASE64 = 4 / 3  # a frame inline in a JSON message is base64

#: The services a bill is itemised by, in print order.
SERVICES = ("api_gateway", "waf", "lambda", "sqs", "dynamodb", "s3", "logs_metrics", "fixed")


class AllInError(ValueError):
    """Bad input to the cost model (one line: frame size, frames per POST, unknown policy ...)."""


@dataclass(frozen=True)
class ModuleLoad:
    """One module at its planned rate: ``rate`` tasks/s, ``batch`` its (rate-weighted) planned batch
    size, ``children`` (child module, fan-out per task), ``groups`` its configurations' (batch, tasks/s)
    summing to ``rate`` (none: all of it at ``batch``)."""

    name: str
    rate: float
    batch: float
    children: tuple[tuple[str, float], ...] = ()
    groups: tuple[tuple[float, float], ...] = ()

    def batches(self) -> tuple[tuple[float, float], ...]:
        """(batch, tasks/s) of each configuration the module runs."""
        return self.groups or ((self.batch, self.rate),)


@dataclass(frozen=True)
class Workload:
    """What the data plane carries: ``frame_rate`` frames/s of ``frame_kb`` KB, ``frames_per_post``
    frames per POST, the modules' loads and the fleet's ``instances`` (their disks and agent metrics)."""

    frame_rate: float
    frame_kb: float
    frames_per_post: int
    modules: tuple[ModuleLoad, ...]
    instances: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.frame_kb) and self.frame_kb > 0):
            raise AllInError(f"--frame-kb must be a number of KB > 0, got {self.frame_kb:g}")
        if not 1 <= self.frames_per_post <= SQS_MAX_ENTRIES:
            raise AllInError(
                f"--frames-per-post must be 1 to 10 (the front's batch form), got {self.frames_per_post}"
            )
        if not (math.isfinite(self.frame_rate) and self.frame_rate > 0):
            raise AllInError(f"the frame rate must be > 0 frames/s, got {self.frame_rate:g}")

    @property
    def frame_bytes(self) -> float:
        return self.frame_kb * KB

    def module(self, name: str) -> ModuleLoad:
        return next(m for m in self.modules if m.name == name)

    def parent_of(self, name: str) -> tuple[ModuleLoad, float] | None:
        """The (first) parent of ``name`` and its fan-out; None for a root."""
        for m in self.modules:
            for child, fan in m.children:
                if child == name:
                    return m, fan
        return None

    @property
    def roots(self) -> tuple[ModuleLoad, ...]:
        return tuple(m for m in self.modules if self.parent_of(m.name) is None)


@dataclass(frozen=True)
class DataPlanePolicy:
    """A data-plane design, as the requests it makes. Sizes in bytes, durations in ms."""

    name: str
    summary: str
    # -- the front: API Gateway + WAF + a Lambda invocation per POST
    api: Literal["rest", "http"]
    waf: bool
    waf_rules: int = 3  # cdk/stacks/front.py: two managed rule groups + a per-IP rate rule
    lambda_memory_mb: int = 1024  # cdk/constants.py FRONT_MEMORY_MB
    front_ms_per_post: float = 12.0  # estimate: handler time of a POST, not measured on AWS
    front_ms_per_frame: float = 3.0  # estimate: decode, validate, route one frame
    front_log_bytes_per_post: float = 1500.0  # EMF metric lines + Lambda's START/END/REPORT lines
    # -- DynamoDB writes made by the front
    frame_items_per_frame: float = 0.0  # the frame item (results table), per frame
    # admission's shared slot count (a conditional UpdateItem), per root module: per frame, or per POST
    slot_updates_per_frame: float = 0.0
    slot_updates_per_post: float = 0.0
    # -- how tasks travel
    messages: Literal["per_task", "per_batch"] = "per_task"  # a message per task, or per POST / parent batch
    child_carries: Literal["frame", "crop"] = "frame"  # the whole frame, or a crop + the parent's results
    crop_fraction: float = 0.25  # a crop's bytes, as a share of the frame's (an assumption)
    envelope_bytes: float = 600.0  # a message's JSON envelope (ids, deadline, routing)
    task_bytes: float = 300.0  # each task's own fields in a message (ids, box, timings)
    parent_result_bytes: float = 200.0  # a parent task's output a child message carries
    # -- per task and per frame storage writes and reads
    task_item_wcu: float = 0.0  # conditional PutItem of the task item, write units per task
    outcome_claim_wcu_per_frame: float = 0.0  # conditional PutItem of the outcome item
    outcome_head_keys: float = 0.0  # keys of a leaf check's first read beyond the roots (frame, outcome)
    outcome_later_walk: float = 0.0  # share of a frame's later leaf checks that walk the whole tree
    result_records: Literal["task_items", "per_leaf_batch"] = "task_items"
    result_sink: Literal["dynamodb", "sqs", "s3"] = "dynamodb"
    result_bytes_per_task: float = 200.0  # a leaf task's output in a result record
    stored_bytes_per_task: float = 600.0  # bytes kept per task for the retention (items, records)
    stored_bytes_per_frame: float = 400.0  # bytes kept per frame (frame item + outcome, or counts)
    retention_days: float = 7.0  # cdk/constants.py RESULTS_RETENTION_DAYS
    frame_retention_days: float = 1.0  # frames stored in S3: a 1-day lifecycle rule (S3's shortest)
    pitr: bool = True  # point-in-time recovery on the results table
    # -- fixed and per-instance
    custom_metrics: int = 60  # CloudWatch metrics (EMF): per app, module, hardware dimensions
    alarms: int = 10
    dashboards: int = 1
    ebs_gb_per_instance: float = 30.0  # an instance's root disk (gp3)
    agent_log_bytes_per_instance_s: float = 400.0  # an agent's EMF flush (about 2 KB every 5 s)

    def with_(self, **changes: object) -> DataPlanePolicy:
        return replace(self, **changes)  # type: ignore[arg-type]


TODAY = DataPlanePolicy(
    name="today",
    summary="the design as the code is: a POST per frame (REST API + WAF), a frame item, a message per "
    "task carrying the whole frame, a task item per task, consistent outcome reads, an outcome claim",
    api="rest",
    waf=True,
    front_ms_per_post=20.0,  # writes the frame item and sends the root messages, in parallel
    front_ms_per_frame=0.0,
    frame_items_per_frame=1.0,  # front/service.py: the frame item (root task ids)
    # front/admission.py _find_slot -> core/adapters/slots.py take, for each frame and root module
    # (SKINFLINT_ADMISSION_SHARED, on in cdk/stacks/front.py)
    slot_updates_per_frame=1.0,
    messages="per_task",
    child_carries="frame",  # workers/worker.py forwards each child with the frame inline
    task_item_wcu=1.0,  # core/adapters/results.py: one conditional PutItem per task (< 1 KB)
    outcome_claim_wcu_per_frame=1.0,  # core/adapters/outcomes.py _claim
    outcome_head_keys=2.0,  # core/adapters/outcomes.py _read: frame + outcome + the roots' task items
    # the first leaf module's check walks the tree; a later one mostly stops at the head (outcome already
    # claimed): 0.36 of them walk it too, which gives the 10.7 read units per traffic frame measured in
    # issue #25's demo run (3 + 3.45 + 3 + 0.36 x 3.45 = 10.7)
    outcome_later_walk=0.36,
    result_records="task_items",
    stored_bytes_per_task=600.0,
    stored_bytes_per_frame=400.0,
)

BATCHED = DataPlanePolicy(
    name="batched",
    summary="issue #25's target: N frames per POST (HTTP API, the front's key check), frames carried "
    "once, a message per parent batch with crops, no per-task writes, a result record per leaf batch",
    api="http",
    waf=False,
    front_ms_per_post=12.0,
    front_ms_per_frame=3.0,
    slot_updates_per_post=1.0,  # admission's shared count, once per POST per root module
    messages="per_batch",
    child_carries="crop",
    result_records="per_leaf_batch",
    result_sink="dynamodb",  # the pull API reads it; sqs / s3 are the push sinks
    stored_bytes_per_task=200.0,  # the leaf's output in its batch's record
    stored_bytes_per_frame=0.0,  # completion by counts: nothing stored per frame
)

POLICIES: dict[str, DataPlanePolicy] = {TODAY.name: TODAY, BATCHED.name: BATCHED}


def policy_named(name: str) -> DataPlanePolicy:
    try:
        return POLICIES[name]
    except KeyError:
        raise AllInError(f"unknown data-plane policy {name!r}; choose one of {', '.join(POLICIES)}") from None


# -- message sizes --------------------------------------------------------------------------------------
def _frame_inline(policy: DataPlanePolicy, w: Workload) -> float:
    return w.frame_bytes * BASE64


def _root_task_bytes(policy: DataPlanePolicy, w: Workload) -> float:
    """Bytes a root task adds to its message (the frame inline, or an S3 key when it does not fit)."""
    if policy.messages == "per_task":
        inline = policy.envelope_bytes + policy.task_bytes + _frame_inline(policy, w)
        return inline if inline <= SQS_MAX_MESSAGE_BYTES else policy.envelope_bytes + policy.task_bytes
    return policy.task_bytes + (_frame_inline(policy, w) if not _post_to_s3(policy, w) else 0.0)


def _post_to_s3(policy: DataPlanePolicy, w: Workload) -> bool:
    """Whether a POST's frames go to S3 (one object per POST, or per frame today) rather than inline."""
    if policy.messages == "per_task":
        return policy.envelope_bytes + policy.task_bytes + _frame_inline(policy, w) > SQS_MAX_MESSAGE_BYTES
    per_post = policy.envelope_bytes + w.frames_per_post * (policy.task_bytes + _frame_inline(policy, w))
    return per_post > SQS_MAX_MESSAGE_BYTES


def _child_task_bytes(policy: DataPlanePolicy, w: Workload) -> float:
    if policy.child_carries == "frame":
        return _root_task_bytes(policy, w) + policy.parent_result_bytes
    return policy.task_bytes + policy.crop_fraction * _frame_inline(policy, w) + policy.parent_result_bytes


def _task_bytes(policy: DataPlanePolicy, w: Workload, module: str) -> float:
    return _root_task_bytes(policy, w) if w.parent_of(module) is None else _child_task_bytes(policy, w)


def _tasks_per_message(policy: DataPlanePolicy, w: Workload, module: str) -> float:
    """Tasks one message of ``module``'s queue carries."""
    if policy.messages == "per_task":
        return 1.0
    parent = w.parent_of(module)
    wanted = float(w.frames_per_post) if parent is None else max(1.0, parent[0].batch * parent[1])
    fits = max(
        1.0, math.floor((SQS_MAX_MESSAGE_BYTES - policy.envelope_bytes) / _task_bytes(policy, w, module))
    )
    return min(wanted, fits)


def _message_bytes(policy: DataPlanePolicy, w: Workload, module: str) -> float:
    per_task = _task_bytes(policy, w, module)
    if policy.messages == "per_task":
        return per_task
    return policy.envelope_bytes + _tasks_per_message(policy, w, module) * per_task


def _sqs_billed(calls: float, payload_bytes: float) -> float:
    """Billed SQS requests of ``calls`` calls carrying ``payload_bytes`` in all (a 64 KB chunk each)."""
    if calls <= 0:
        return 0.0
    return calls * max(1.0, math.ceil(payload_bytes / calls / SQS_CHUNK_BYTES))


# -- per batch ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Units:
    """Billing units, as counts: ``sqs`` requests, ``wcu`` / ``rcu`` DynamoDB request units,
    ``s3_put`` / ``s3_get`` requests."""

    sqs: float = 0.0
    wcu: float = 0.0
    rcu: float = 0.0
    s3_put: float = 0.0
    s3_get: float = 0.0

    def __add__(self, other: _Units) -> _Units:
        return _Units(*(a + b for a, b in zip(self._t(), other._t(), strict=True)))

    def __mul__(self, k: float) -> _Units:
        return _Units(*(a * k for a in self._t()))

    def _t(self) -> tuple[float, float, float, float, float]:
        return (self.sqs, self.wcu, self.rcu, self.s3_put, self.s3_get)


def _batch_units(policy: DataPlanePolicy, w: Workload, module: ModuleLoad, batch: float) -> _Units:
    """The units one batch of ``batch`` tasks of ``module`` costs: receive, delete and child-send calls
    (billed by 64 KB chunk), the result record of a leaf batch, S3 reads of frames stored there."""
    messages = batch / _tasks_per_message(policy, w, module.name)
    # a receive returns up to 10 messages: per batch, a call of its own unless one message holds more than
    # a batch (then a call per message); today's deep queues fill every receive (10 per call)
    calls = (
        max(messages / SQS_MAX_ENTRIES, min(1.0, messages))
        if policy.messages == "per_batch"
        else messages / SQS_MAX_ENTRIES
    )
    payload = messages * _message_bytes(policy, w, module.name)
    sqs = _sqs_billed(calls, payload)  # ReceiveMessage
    sqs += calls  # DeleteMessageBatch (receipts are small)
    for child, fan in module.children:
        child_tasks = batch * fan
        child_messages = child_tasks / _tasks_per_message(policy, w, child)
        child_calls = max(1.0, child_messages / SQS_MAX_ENTRIES)
        sqs += _sqs_billed(child_calls, child_messages * _message_bytes(policy, w, child))
    units = _Units(sqs=sqs)
    if not module.children and policy.result_records == "per_leaf_batch":
        record = policy.envelope_bytes + batch * policy.result_bytes_per_task
        if policy.result_sink == "dynamodb":
            units += _Units(wcu=math.ceil(record / DDB_WRITE_UNIT_BYTES))
        elif policy.result_sink == "sqs":  # a results queue: send, the consumer's receive and delete
            units += _Units(sqs=2 * math.ceil(record / SQS_CHUNK_BYTES) + 1)
        else:  # an S3 object per batch, read once by its consumer
            units += _Units(s3_put=1.0, s3_get=1.0)
    if w.parent_of(module.name) is None and _post_to_s3(policy, w) and policy.messages == "per_batch":
        units += _Units(s3_get=messages)  # a root message names its POST's object: one GET each
    return units


def _task_units(policy: DataPlanePolicy, w: Workload, module: ModuleLoad) -> _Units:
    """Units per task that do not depend on the batch: today's task item, and the S3 read of a frame a
    per-task message names (frames over SQS's limit)."""
    units = _Units(wcu=policy.task_item_wcu)
    if policy.messages == "per_task" and _post_to_s3(policy, w):
        units += _Units(s3_get=1.0)
    return units


def batch_usd(policy: DataPlanePolicy, w: Workload, module: str, batch: int, prices: AwsPrices) -> float:
    """USD of the requests one batch of ``batch`` tasks of ``module`` makes (receive, delete, child sends,
    result record): the per-batch term the planner may fold into a configuration's price."""
    return _usd(_batch_units(policy, w, w.module(module), float(batch)), prices)


def _usd(units: _Units, prices: AwsPrices) -> float:
    return (
        prices.require("sqs", "Requests").cost(units.sqs)
        + prices.require("dynamodb", "WriteRequestUnits").cost(units.wcu)
        + prices.require("dynamodb", "ReadRequestUnits").cost(units.rcu)
        + prices.require("s3", "PutClassRequests").cost(units.s3_put)
        + prices.require("s3", "GetClassRequests").cost(units.s3_get)
    )


# -- the bill -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DataPlaneBill:
    """The data plane's $/h per service (:data:`SERVICES`) at ``frame_rate``, the billing units per frame
    and the prices' provenance."""

    policy: str
    frame_rate: float
    per_hour: dict[str, float]
    units_per_frame: dict[str, float]
    prices: dict[str, dict[str, str]]

    @property
    def total_per_hour(self) -> float:
        return sum(self.per_hour.values())

    def per_million_frames(self, usd_per_hour: float) -> float:
        return usd_per_hour / (self.frame_rate * 3600) * 1e6

    def itemised(self) -> dict[str, dict[str, float]]:
        """``{service: {"per_hour": ..., "per_million_frames": ...}}``."""
        return {
            service: {
                "per_hour": round(usd, 6),
                "per_million_frames": round(self.per_million_frames(usd), 6),
            }
            for service, usd in self.per_hour.items()
        }


def _front(
    policy: DataPlanePolicy, w: Workload, prices: AwsPrices
) -> tuple[dict[str, float], dict[str, float]]:
    """$/h of API Gateway, WAF and Lambda, and their units per frame."""
    posts = w.frame_rate / w.frames_per_post
    post_bytes = w.frames_per_post * w.frame_bytes * BASE64
    if policy.api == "http":
        api_requests = posts * max(1, math.ceil(post_bytes / HTTP_API_METER_BYTES))
        api = prices.require("apigateway", "HttpApiRequests").cost(api_requests)
    else:
        api_requests = posts
        api = prices.require("apigateway", "Requests").cost(api_requests)
    waf = prices.require("wafv2", "Requests").cost(posts) if policy.waf else 0.0
    ms = policy.front_ms_per_post + w.frames_per_post * policy.front_ms_per_frame
    gb_s = posts * ms / 1e3 * policy.lambda_memory_mb / 1024
    lam = prices.require("lambda", "Requests").cost(posts) + prices.require("lambda", "GBSeconds").cost(gb_s)
    per_s = {"api_gateway": api, "waf": waf, "lambda": lam}
    units = {
        "api_requests": api_requests / w.frame_rate,
        "waf_requests": (posts if policy.waf else 0.0) / w.frame_rate,
        "lambda_invocations": posts / w.frame_rate,
        "lambda_gb_s": gb_s / w.frame_rate,
    }
    return {k: v * 3600 for k, v in per_s.items()}, units


def _front_units(policy: DataPlanePolicy, w: Workload) -> _Units:
    """Per second: the front's DynamoDB writes, root sends and S3 puts."""
    posts = w.frame_rate / w.frames_per_post
    units = _Units(
        wcu=w.frame_rate * policy.frame_items_per_frame
        + (w.frame_rate * policy.slot_updates_per_frame + posts * policy.slot_updates_per_post) * len(w.roots)
    )
    for root in w.roots:
        if (
            policy.messages == "per_task"
        ):  # a message per frame, in SendMessageBatch calls of the POST's frames
            calls = posts * max(1.0, w.frames_per_post / SQS_MAX_ENTRIES)
            units += _Units(sqs=_sqs_billed(calls, w.frame_rate * _message_bytes(policy, w, root.name)))
        else:  # one message per POST
            units += _Units(sqs=_sqs_billed(posts, posts * _message_bytes(policy, w, root.name)))
    if _post_to_s3(policy, w):
        units += _Units(s3_put=w.frame_rate if policy.messages == "per_task" else posts)
    return units


def _outcome_units(policy: DataPlanePolicy, w: Workload) -> _Units:
    """Per second: today's outcome checks (consistent reads by each leaf module reached) and claims."""
    if policy.outcome_head_keys <= 0 and policy.outcome_claim_wcu_per_frame <= 0:
        return _Units()
    roots = len(w.roots)
    leaves = [m for m in w.modules if not m.children]
    checks = sum(min(1.0, m.rate / w.frame_rate) for m in leaves)  # leaf modules a frame reaches
    walked = sum(m.rate for m in w.modules if w.parent_of(m.name) is not None) / w.frame_rate
    head = policy.outcome_head_keys + roots
    reads = head * checks + walked * (1 + policy.outcome_later_walk * max(0.0, checks - 1))
    return _Units(rcu=w.frame_rate * reads, wcu=w.frame_rate * policy.outcome_claim_wcu_per_frame)


def data_plane_bill(policy: DataPlanePolicy, w: Workload, prices: AwsPrices) -> DataPlaneBill:
    """The data plane's bill of ``w`` under ``policy`` at ``prices``."""
    per_hour, units_per_frame = _front(policy, w, prices)
    per_s = _front_units(policy, w) + _outcome_units(policy, w)
    for m in w.modules:
        if m.rate <= 0:
            continue
        for batch, rate in m.batches():  # each configuration's batches: its tasks/s / its batch
            per_s += _batch_units(policy, w, m, batch) * (rate / batch)
        per_s += _task_units(policy, w, m) * m.rate
    per_hour["sqs"] = prices.require("sqs", "Requests").cost(per_s.sqs) * 3600
    month = 1 / HOURS_PER_MONTH
    tasks = sum(m.rate for m in w.modules)
    # the records kept for the retention: in the results table, unless a push sink holds them (an S3
    # object per batch is kept as long; an SQS results queue's messages cost nothing to keep)
    kept_gb = tasks * policy.stored_bytes_per_task * policy.retention_days * 86400 / GB
    in_table = policy.result_records == "task_items" or policy.result_sink == "dynamodb"
    stored_gb = (kept_gb if in_table else 0.0) + w.frame_rate * policy.stored_bytes_per_frame * (
        policy.retention_days * 86400 / GB
    )
    ddb = (
        prices.require("dynamodb", "WriteRequestUnits").cost(per_s.wcu)
        + prices.require("dynamodb", "ReadRequestUnits").cost(per_s.rcu)
    ) * 3600
    ddb += prices.require("dynamodb", "StorageGBMonths").cost(stored_gb) * month
    if policy.pitr:
        ddb += prices.require("dynamodb", "PitrGBMonths").cost(stored_gb) * month
    per_hour["dynamodb"] = ddb
    s3_stored_gb = kept_gb if not in_table and policy.result_sink == "s3" else 0.0
    if _post_to_s3(policy, w):  # frames kept in S3 for the retention (a lifecycle rule deletes them)
        s3_stored_gb += w.frame_rate * w.frame_bytes * policy.frame_retention_days * 86400 / GB
    per_hour["s3"] = (
        prices.require("s3", "PutClassRequests").cost(per_s.s3_put)
        + prices.require("s3", "GetClassRequests").cost(per_s.s3_get)
    ) * 3600 + prices.require("s3", "StorageGBMonths").cost(s3_stored_gb) * month
    posts = w.frame_rate / w.frames_per_post
    log_bytes_s = (
        posts * policy.front_log_bytes_per_post + w.instances * policy.agent_log_bytes_per_instance_s
    )
    per_hour["logs_metrics"] = (
        prices.require("logs", "IngestedBytes").cost(log_bytes_s * 3600)
        + prices.require("logs", "StoredGBMonths").cost(log_bytes_s * 3600 * 30 * 24 / GB) * month
    )  # 30 days kept (cdk/constants.py LOG_RETENTION_DAYS)
    fixed = (
        prices.require("monitoring", "MetricMonths").cost(policy.custom_metrics)
        + prices.require("monitoring", "AlarmMonths").cost(policy.alarms)
        + prices.require("monitoring", "DashboardMonths").cost(policy.dashboards)
        + prices.require("ebs", "Gp3GBMonths").cost(w.instances * policy.ebs_gb_per_instance)
    )
    if policy.waf:
        fixed += prices.require("wafv2", "WebAclMonths").cost(1) + prices.require("wafv2", "RuleMonths").cost(
            policy.waf_rules
        )
    per_hour["fixed"] = fixed * month
    units_per_frame.update(
        {
            "sqs_requests": per_s.sqs / w.frame_rate,
            "dynamodb_write_units": per_s.wcu / w.frame_rate,
            "dynamodb_read_units": per_s.rcu / w.frame_rate,
            "s3_put_requests": per_s.s3_put / w.frame_rate,
            "s3_get_requests": per_s.s3_get / w.frame_rate,
            "tasks": tasks / w.frame_rate,
        }
    )
    used = [
        ("apigateway", "HttpApiRequests" if policy.api == "http" else "Requests"),
        ("lambda", "Requests"),
        ("lambda", "GBSeconds"),
        ("sqs", "Requests"),
        ("dynamodb", "WriteRequestUnits"),
        ("dynamodb", "ReadRequestUnits"),
        ("dynamodb", "StorageGBMonths"),
        ("s3", "PutClassRequests"),
        ("logs", "IngestedBytes"),
        ("monitoring", "MetricMonths"),
        *([("wafv2", "Requests"), ("wafv2", "WebAclMonths")] if policy.waf else []),
    ]
    return DataPlaneBill(
        policy=policy.name,
        frame_rate=w.frame_rate,
        per_hour={service: per_hour[service] for service in SERVICES},
        units_per_frame={k: round(v, 6) for k, v in units_per_frame.items()},
        prices={f"{s}.{u}": prices.provenance(s, u) for s, u in used},
    )


def workload_from_plan(
    modules: Mapping[str, tuple[float, list[tuple[int, float]]]],
    edges: list[tuple[str, str, float]],
    *,
    frame_rate: float,
    frame_kb: float,
    frames_per_post: int,
    instances: int = 0,
) -> Workload:
    """A :class:`Workload` from a plan: ``modules`` maps a module to (its rate in tasks/s, its groups as
    (batch, tasks/s on that batch, dummy load included)). Each group carries its share of the module's
    rate (the dummy load is not traffic); a module's batch, which sizes its children's messages, is the
    rate-weighted mean of its groups'."""
    loads = []
    for name, (rate, groups) in modules.items():
        total = sum(r for _, r in groups)
        if total > 0:
            shares = tuple((float(max(1, b)), rate * r / total) for b, r in groups if r > 0)
            batch = sum(b * r for b, r in shares) / rate if rate > 0 else shares[0][0]
        else:
            batch = float(max((b for b, _ in groups), default=1))
            shares = ((max(1.0, batch), rate),)
        children = tuple((dst, fan) for src, dst, fan in edges if src == name)
        loads.append(ModuleLoad(name, rate, max(1.0, batch), children, shares))
    return Workload(frame_rate, frame_kb, frames_per_post, tuple(loads), instances)
