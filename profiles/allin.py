"""The all-in bill of a planned app: the EC2 fleet plus the data plane's AWS requests, storage and fixed
costs at the planned rates (docs/cost.md). Pure: no AWS, no clock, no environment; the prices come from
:class:`~profiles.aws_prices.AwsPrices` (``profiles/aws_prices.json``, each with its date and source).

A data plane is described by a :class:`DataPlanePolicy`: every request it makes per POST, per frame, per
task and per batch is a named field, so the model can be audited against the code. Two policies:

- :data:`TODAY`: the design as the code is (front/service.py, front/admission.py, workers/worker.py,
  workers/crops.py, core/wire.py, core/adapters/results.py, core/adapters/slots.py, docs/dataplane.md):
  1-10 frames per POST behind an HTTP API (the front checks the key); per POST one ``BatchWriteItem`` of
  the POST item (kept in its due minute's partition: it is the deadline index too) and one slot-count
  ``UpdateItem`` per root module; the
  tasks one send puts on a queue in one message (a POST's frames once per root queue; a parent batch's
  children once per child queue, each with its crop of the frame and the ancestors' results once); no
  per-task writes and no outcome reads or claims: one compressed record per batch and POST among its
  terminal tasks, in the results table (pull) or on the app's results queue (push:
  ``result_sink="sqs"``);
- :data:`PER_TASK`: the same with the wire before it was packed and cropped (a message per task, each
  child's carrying the whole frame and every ancestor's result in full), for comparison.

The model's three kinds of terms: per POST and per frame (the front), per task (the bytes a task's
message carries) and per batch (receive, delete and child-send calls, the result records of a batch
of terminal tasks; :func:`batch_usd` prices one batch). The per-batch terms scale with rate / batch, so batch
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
    "PER_TASK",
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
    "with_results",
    "workload_from_plan",
]

KB = 1024
GB = 1024**3
SQS_CHUNK_BYTES = 64 * KB  # SQS bills each 64 KB chunk of a request's payload as one request
SQS_MAX_MESSAGE_BYTES = 256 * KB  # a message, and a SendMessageBatch request, at most
SQS_INLINE_LIMIT_BYTES = 200 * KB  # core/settings.py: base64 frames up to this travel inline, else S3
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
    # -- DynamoDB writes made by the front, per POST: one BatchWriteItem of the POST item (a base plus
    # each frame's index, accept time, deadline and roots) and, with ``index_item``, a separate
    # deadline-index item (without it the POST item is kept in its due minute's partition instead)
    post_items: bool = True
    post_item_bytes: float = 103.0
    post_item_bytes_per_frame: float = 58.0
    index_item: bool = False
    index_item_bytes: float = 95.0
    # admission's shared slot count (a conditional UpdateItem), per root module: per frame, or per POST
    slot_updates_per_frame: float = 0.0
    slot_updates_per_post: float = 0.0
    # -- how tasks travel
    messages: Literal["per_task", "per_batch"] = "per_task"  # a message per task, or per POST / parent batch
    child_carries: Literal["frame", "crop"] = "frame"  # the whole frame, or a crop + the parent's results
    crop_fraction: float = 0.25  # a crop's bytes, as a share of the frame's (an assumption)
    envelope_bytes: float = 600.0  # a message's JSON envelope (ids, deadline, routing)
    task_bytes: float = 300.0  # each task's own fields in a message (ids, box, timings)
    parent_result_bytes: float = 200.0  # an ancestor's output a child message carries (per ancestor)
    # -- the result records: per batch, one item per POST among its terminal tasks (no children), written
    # with BatchWriteItem: ``record_item_bytes`` (keys, times, the first task) + a task's compressed bytes
    # per further terminal task (with its share of the ancestors the record carries)
    result_sink: Literal["dynamodb", "sqs", "s3"] = "dynamodb"
    record_item_bytes: float = 400.0
    result_bytes_per_task: float = 65.0
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
    summary="the design as the code is: 1-10 frames per POST (HTTP API), a POST item in its due minute's "
    "partition, a message per POST and root queue carrying the frames once, a message per parent batch and "
    "child queue carrying each child's crop and the ancestors' results once, a record per batch and POST "
    "of the terminal tasks (pull: the results table; push: the app's results queue)",
    # cdk/stacks/front.py: an HTTP API by default, the key checked by the front (-c front_api=rest: a
    # REST API + WAF, two managed rule groups + a per-IP rate rule: bench tco's today_rest_waf prices it)
    api="http",
    waf=False,
    # front/service.py accept: validate and route each frame, then the POST's BatchWriteItem and the root
    # messages' SendMessageBatch in parallel (estimates, not measured on AWS)
    front_ms_per_post=20.0,
    front_ms_per_frame=3.0,
    # core/adapters/results.py create_frames: one BatchWriteItem of the POST item, keyed by its due minute
    # and shard (measured with core/adapters/usage.py item_size: 161 B for 1 frame, 683 B for 10: 103 B +
    # 58 B per frame): 1 write unit per POST of up to 10 frames; no separate deadline-index item
    post_items=True,
    index_item=False,
    # front/admission.py _take_shared -> core/adapters/slots.py take_upto: one conditional UpdateItem per
    # POST and root module (SKINFLINT_ADMISSION_SHARED, on in cdk/stacks/front.py); a second one when the
    # window has room for part of the POST only, and one in the next window for the rest: not counted
    slot_updates_per_post=1.0,
    # core/wire.py + core/adapters/queues.py send_many: the tasks one send puts on a queue travel in one
    # message of up to 256 KiB (a POST's root tasks per queue, a parent batch's children per queue), the
    # fields they share once; a frame inline base64 (core/settings.py SQS_INLINE_LIMIT_BYTES, 200 KB,
    # else an S3 object per frame, and the message carries its key)
    messages="per_batch",
    # workers/crops.py: a child carries its crop of the frame (a 0.4 x 0.4 box at the frame's resolution,
    # re-encoded like the source), measured 1,838 B of an 8,135 B demo frame (0.23), 9,290 of 54.6 KB
    # (0.17), 18,894 of 122 KB (0.15): 0.23 is the dearest
    child_carries="crop",
    crop_fraction=0.23,
    # measured (core/wire.py v2 bodies, docs/dataplane.md "Wire format"): ten demo frames' root message
    # 111,364 B, of which 108,480 B are the frames' base64: 2,884 B of envelope and task fields
    envelope_bytes=300.0,
    task_bytes=260.0,
    # a child's lineage: each ancestor's TaskOut JSON, 471 B with the runtime's output (workers/runtimes.py
    # OnnxRuntime.run), carried once per body for the children of one parent (the traffic app's 1.5-2 per
    # parent request: about 240 B per child and ancestor)
    parent_result_bytes=240.0,
    # core/adapters/results.py record_tasks / _pack: the traffic app's terminal tasks with their lineage
    # as JSON compressed against the records' preset dictionary (core/record_codec.py), measured with
    # realistic timestamps and outputs: 159 B for a lone task, 1,031 B for 16 (8 frames), 1,299 B for
    # 20 (plain zlib: 339, 1,266, 1,536), plus 112 B of keys, recorded_at and expires_at per item: about
    # 280 B + 60 B per further task. A push app's go to its results queue instead, one message per batch
    # and POST (390 B for one task, 2,312 B for 20: one SQS request each): ``result_sink="sqs"`` (bench
    # tco's today_push)
    result_sink="dynamodb",
    record_item_bytes=280.0,
    result_bytes_per_task=60.0,
)

PER_TASK = TODAY.with_(
    name="per_task",
    summary="the data plane before messages were packed and children cropped: a message per task, "
    "each child's carrying the whole frame and every ancestor's result (for comparison)",
    messages="per_task",
    child_carries="frame",
    # measured on TaskMessage.model_dump_json: a root message without its frame is 512 B (the envelope
    # and the task's fields are one: a message is one task); 471 B per ancestor in a child's lineage
    envelope_bytes=212.0,
    task_bytes=300.0,
    parent_result_bytes=471.0,
)

POLICIES: dict[str, DataPlanePolicy] = {TODAY.name: TODAY, PER_TASK.name: PER_TASK}


def with_results(policy: DataPlanePolicy, results: str) -> DataPlanePolicy:
    """``policy`` for an app whose results are ``results`` (its spec's ``"results"``): "pull" keeps the
    records in the results table; "push" sends them to the app's results queue (``<name>_push``)."""
    if results == "push" and policy.result_sink != "sqs":
        return policy.with_(name=f"{policy.name}_push", result_sink="sqs")
    return policy


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
        inline = 0.0 if _post_to_s3(policy, w) else _frame_inline(policy, w)
        return policy.envelope_bytes + policy.task_bytes + inline
    return policy.task_bytes + (_frame_inline(policy, w) if not _post_to_s3(policy, w) else 0.0)


def _post_to_s3(policy: DataPlanePolicy, w: Workload) -> bool:
    """Whether frames go to S3 (an object per frame, front/service.py _payload: base64 over the 200 KB
    inline limit) rather than inline; inline frames of a POST fill as few messages as fit 256 KiB."""
    return _frame_inline(policy, w) > SQS_INLINE_LIMIT_BYTES


def _crop_to_s3(policy: DataPlanePolicy, w: Workload) -> bool:
    """Whether a child's crop goes to S3 (workers/crops.py child_input: base64 over the inline limit)."""
    return policy.child_carries == "crop" and policy.crop_fraction * _frame_inline(policy, w) > (
        SQS_INLINE_LIMIT_BYTES
    )


def _ancestors(w: Workload, module: str) -> int:
    """How many ancestors a task of ``module`` has (0 for a root): the lineage its message carries."""
    depth, seen = 0, {module}
    parent = w.parent_of(module)
    while parent is not None and parent[0].name not in seen:
        depth += 1
        seen.add(parent[0].name)
        parent = w.parent_of(parent[0].name)
    return depth


def _child_task_bytes(policy: DataPlanePolicy, w: Workload, module: str) -> float:
    lineage = _ancestors(w, module) * policy.parent_result_bytes
    if policy.child_carries == "frame":
        return _root_task_bytes(policy, w) + lineage
    crop = 0.0 if _crop_to_s3(policy, w) else policy.crop_fraction * _frame_inline(policy, w)
    envelope = policy.envelope_bytes if policy.messages == "per_task" else 0.0  # a message per task
    return envelope + policy.task_bytes + crop + lineage


def _task_bytes(policy: DataPlanePolicy, w: Workload, module: str) -> float:
    if w.parent_of(module) is None:
        return _root_task_bytes(policy, w)
    return _child_task_bytes(policy, w, module)


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
    ``s3_put`` / ``s3_get`` requests (nothing reads on the normal path: ``rcu`` stays 0; a ``GET`` and
    a redelivery's check are not counted); ``kept`` bytes written to the results table (``kept_s3``: to S3)
    that stay for the retention."""

    sqs: float = 0.0
    wcu: float = 0.0
    rcu: float = 0.0
    s3_put: float = 0.0
    s3_get: float = 0.0
    kept: float = 0.0
    kept_s3: float = 0.0

    def __add__(self, other: _Units) -> _Units:
        return _Units(*(a + b for a, b in zip(self._t(), other._t(), strict=True)))

    def __mul__(self, k: float) -> _Units:
        return _Units(*(a * k for a in self._t()))

    def _t(self) -> tuple[float, ...]:
        return (self.sqs, self.wcu, self.rcu, self.s3_put, self.s3_get, self.kept, self.kept_s3)


def _posts_per_batch(w: Workload, module: ModuleLoad, batch: float) -> float:
    """POSTs a batch of ``module`` holds tasks of: a POST brings ``frames_per_post`` x the module's
    tasks per frame at once, so ``batch`` consecutive tasks span 1 + (batch - 1) / that many POSTs on
    average (at most one per task)."""
    per_post = w.frames_per_post * module.rate / w.frame_rate
    if per_post <= 0:
        return batch
    return min(batch, 1.0 + (batch - 1.0) / per_post)


def _record_units(policy: DataPlanePolicy, w: Workload, module: ModuleLoad, batch: float) -> _Units:
    """The result records of a batch of terminal tasks: one item per POST among them
    (core/adapters/results.py record_tasks), each billed by its KB of compressed record."""
    posts = _posts_per_batch(w, module, batch)
    item = policy.record_item_bytes + max(0.0, batch / posts - 1.0) * policy.result_bytes_per_task
    if policy.result_sink == "dynamodb":  # BatchWriteItem: a write unit per KB (started) of each item
        # items of one batch differ in size (a POST's piece of it), so a unit per started KB of the mean
        # item would jump; its mean over a spread of sizes is the KBs + 0.5, and at least 1
        units = max(1.0, item / DDB_WRITE_UNIT_BYTES + 0.5)
        return _Units(wcu=posts * units, kept=posts * item)
    if policy.result_sink == "sqs":  # a results queue: send, the consumer's receive and delete
        return _Units(sqs=2 * math.ceil(posts * item / SQS_CHUNK_BYTES) + 1)
    return _Units(s3_put=1.0, s3_get=1.0, kept_s3=posts * item)  # an S3 object per batch, read once


def _batch_units(policy: DataPlanePolicy, w: Workload, module: ModuleLoad, batch: float) -> _Units:
    """The units one batch of ``batch`` tasks of ``module`` costs: receive, delete and child-send calls
    (billed by 64 KB chunk), the result records of a batch of terminal tasks, S3 reads of frames stored
    there."""
    messages = batch / _tasks_per_message(policy, w, module.name)
    # a receive returns up to 10 messages: per batch, a call of its own unless one message holds more than
    # a batch (then a call per message); a message per task: deep queues fill every receive (10 per call)
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
    if not module.children:  # a task that forwards children is not written: its result travels on
        units += _record_units(policy, w, module, batch)
    return units


def _task_units(policy: DataPlanePolicy, w: Workload, module: ModuleLoad) -> _Units:
    """Units per task that do not depend on the batch (no per-task writes): the S3 read of a frame
    over the inline limit (a root task's; a child's too when it carries the frame), and a crop over
    it (written by the parent's worker, read by the child's)."""
    root = w.parent_of(module.name) is None
    if root or policy.child_carries == "frame":
        return _Units(s3_get=1.0) if _post_to_s3(policy, w) else _Units()
    return _Units(s3_put=1.0, s3_get=1.0) if _crop_to_s3(policy, w) else _Units()


def batch_usd(policy: DataPlanePolicy, w: Workload, module: str, batch: int, prices: AwsPrices) -> float:
    """USD of the requests one batch of ``batch`` tasks of ``module`` makes (receive, delete, child sends,
    result records): the per-batch term the planner may fold into a configuration's price."""
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
        wcu=(w.frame_rate * policy.slot_updates_per_frame + posts * policy.slot_updates_per_post)
        * len(w.roots)
    )
    if policy.post_items:  # one BatchWriteItem: the POST item (and a deadline-index item, if separate)
        post_item = policy.post_item_bytes + w.frames_per_post * policy.post_item_bytes_per_frame
        index = policy.index_item_bytes if policy.index_item else 0.0
        wcu = math.ceil(post_item / DDB_WRITE_UNIT_BYTES) + math.ceil(index / DDB_WRITE_UNIT_BYTES)
        units += _Units(wcu=posts * wcu, kept=posts * (post_item + index))
    for root in w.roots:
        if policy.messages == "per_task":  # a message per frame, in SendMessageBatch calls of the POST's
            calls = posts * max(1.0, w.frames_per_post / SQS_MAX_ENTRIES)
            units += _Units(sqs=_sqs_billed(calls, w.frame_rate * _message_bytes(policy, w, root.name)))
        else:  # a POST's frames in as few messages as fit 256 KiB, sent in as few calls as fit it
            per_message = _tasks_per_message(policy, w, root.name)
            messages = math.ceil(w.frames_per_post / per_message)
            frames = w.frames_per_post * _task_bytes(policy, w, root.name)
            post_bytes = messages * policy.envelope_bytes + frames
            calls = max(1, math.ceil(post_bytes / SQS_MAX_MESSAGE_BYTES))
            units += _Units(sqs=_sqs_billed(posts * calls, posts * post_bytes))
    if _post_to_s3(policy, w):  # an object per frame
        units += _Units(s3_put=w.frame_rate)
    return units


def data_plane_bill(policy: DataPlanePolicy, w: Workload, prices: AwsPrices) -> DataPlaneBill:
    """The data plane's bill of ``w`` under ``policy`` at ``prices``."""
    per_hour, units_per_frame = _front(policy, w, prices)
    per_s = _front_units(policy, w)
    for m in w.modules:
        if m.rate <= 0:
            continue
        for batch, rate in m.batches():  # each configuration's batches: its tasks/s / its batch
            per_s += _batch_units(policy, w, m, batch) * (rate / batch)
        per_s += _task_units(policy, w, m) * m.rate
    per_hour["sqs"] = prices.require("sqs", "Requests").cost(per_s.sqs) * 3600
    month = 1 / HOURS_PER_MONTH
    tasks = sum(m.rate for m in w.modules)
    # the items kept for the retention: the POST items and the result records in the results table
    # (a push sink's records: an S3 object per batch is kept as long; an SQS queue's cost nothing to keep)
    retention_s = policy.retention_days * 86400
    stored_gb = per_s.kept * retention_s / GB
    ddb = (
        prices.require("dynamodb", "WriteRequestUnits").cost(per_s.wcu)
        + prices.require("dynamodb", "ReadRequestUnits").cost(per_s.rcu)
    ) * 3600
    ddb += prices.require("dynamodb", "StorageGBMonths").cost(stored_gb) * month
    if policy.pitr:
        ddb += prices.require("dynamodb", "PitrGBMonths").cost(stored_gb) * month
    per_hour["dynamodb"] = ddb
    s3_stored_gb = per_s.kept_s3 * retention_s / GB
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
