"""Versioned wire formats of the data plane (pydantic).

- :class:`TaskMessage` is the SQS message body (schema version ``v``): one request of one module,
  with its idempotency key, deadline, payload pointer and the batch slot TC dispatch gave it.
- :class:`Deployment` is what the front and the workers read of an app in a plan version (the plan
  store, ``core.adapters.plan_store``): the app's DAG, the plan, the schedule origin and the queue
  of every machine.
- :class:`Assignment` tells one worker which module, configuration and queue it serves (the
  instance agent derives it from a share of its slot: ``workers.shares.assignment_for``).
- ``Frame*`` / ``ResultOut`` / ``ErrorOut`` are the HTTP API's models.

Times are epoch seconds (floats) on the wire; schedule times are seconds since ``origin_s``.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.models import Plan  # noqa: TC001 - pydantic resolves it at run time

__all__ = [
    "SCHEMA_VERSION",
    "SERVICE_CORRECTION_KEY",
    "Assignment",
    "Deployment",
    "ErrorOut",
    "FrameAccepted",
    "FrameIn",
    "FramesAccepted",
    "FramesIn",
    "Payload",
    "ResultOut",
    "TaskMessage",
    "TaskOut",
    "queue_key",
]

SCHEMA_VERSION: Final = 1


def queue_key(group: int, machine: int) -> str:
    """Key of a machine's queue inside :attr:`Deployment.queues` (``"group/machine"``)."""
    return f"{group}/{machine}"


class Payload(BaseModel):
    """Where the frame bytes are: inline (base64) when small, else an S3 object (``s3_key``)."""

    model_config = ConfigDict(frozen=True)

    content_type: str
    size: int = Field(ge=0)
    inline_b64: str | None = None
    s3_key: str | None = None

    @model_validator(mode="after")
    def _one_location(self) -> Payload:
        if (self.inline_b64 is None) == (self.s3_key is None):
            raise ValueError("a payload is either inline or in S3, exactly one of them")
        return self


class TaskMessage(BaseModel):
    """One request of one module: the SQS message body (schema version 1)."""

    model_config = ConfigDict(frozen=True)

    v: Literal[1] = SCHEMA_VERSION
    idempotency_key: str  # request_id + "/" + task_id: unique per task, stable across redeliveries
    request_id: str
    task_id: str  # "detector" for a root; "detector/car.2" for the third car of that detector task
    app: str
    module: str
    deployment_version: int
    accepted_at: float  # when the front accepted the frame (epoch s)
    enqueued_at: float  # when this module's request was dispatched (epoch s)
    deadline: float  # end-to-end deadline of the frame (epoch s)
    module_deadline: float  # the slot's deadline for this module (epoch s)
    group: int
    machine: int
    batch_id: int
    window_end: float  # the worker closes this batch at this time (epoch s)
    payload: Payload
    region: list[float] | None = None  # crop box (x0, y0, x1, y1, fractions) for a child request
    # the share of its frame this task carries, an exact fraction ("1" for a root, "1/3" for each
    # of three children of a root): a frame is finished when the weights of its terminal tasks (no
    # children, or dropped) sum to 1 (core/adapters/results.py)
    weight: str = "1"
    # what its ancestors produced, as they would have been recorded: results travel with the child
    # messages and only terminal tasks are written (in their batch's record)
    lineage: list[TaskOut] = Field(default_factory=list)
    # a copy an ancestor may have sent twice (it was redelivered): its record checks before counting
    recheck: bool = False

    @classmethod
    def parse(cls, body: str) -> TaskMessage:
        return cls.model_validate_json(body)


#: Module-plan extra: the service-time correction (hardware -> s) its batch durations include
#: (control/calibration.py); an emulating worker sleeps the duration without it.
SERVICE_CORRECTION_KEY = "service_correction_s"


class Assignment(BaseModel):
    """What one worker serves: a machine of a module's config group and its queue."""

    worker_id: str
    app: str
    module: str
    group: int
    machine: int
    hardware: str
    batch: int
    concurrency: int = 1
    duration_s: float  # the planned batch duration: device time (what the plan assumed it occupies)
    overhead_s: float = 0.0  # the group's latency-only hop (delivery), planned apart from device time
    model_s: float | None = None  # the profile's own batch duration (what emulation sleeps)
    added_wait_s: float = 0.0  # the most its batches may wait for co-located shares (fleet packing)
    queue_url: str
    runtime: Literal["onnx", "emulated"]
    model: str = ""
    model_path: str | None = None
    threads: int = 1


class Deployment(BaseModel):
    """One app as deployed: DAG, plan, schedule origin and the queue of every machine."""

    app: str
    version: int
    origin_s: float
    slo_s: float
    frame_rate: float
    roots: list[str]
    edges: list[tuple[str, str, float]]
    plan: Plan
    queues: dict[str, dict[str, str]]  # module -> queue_key(group, machine) -> queue URL
    emulated_hardware: list[str] = Field(default_factory=list)
    # the planning hop: latency only in plans whose groups carry overhead_s; a plan whose groups do not
    # (published before hops were planned apart) holds it in every duration (workers/shares.py)
    overhead_s: float = 0.0
    # the SLO the plan was made for: slo_s less the app's admission_reserve (None: slo_s); frames keep
    # slo_s as their deadline, the difference is for frames admitted into a later window
    planning_slo_s: float | None = None
    # where the app's results go (the app spec's ``results``, docs/dataplane.md "Results: pull or
    # push"): "pull", records in the results table read by GET /v1/requests/{id}; "push", each
    # batch's records sent to the app's results queue (``results_queue``, its URL) for a consumer
    results: Literal["pull", "push"] = "pull"
    results_queue: str | None = None

    def children(self, module: str) -> list[tuple[str, float]]:
        return [(dst, fan) for src, dst, fan in self.edges if src == module]

    def min_tail_s(self, module: str) -> float:
        """Smallest time the modules below ``module`` need (the longest chain of planned batch
        durations, each with the hop that delivers it): what early drop keeps in reserve when it
        decides whether a frame can still meet its deadline."""
        best = 0.0
        for child, _ in self.children(module):
            groups = self.plan.modules[child].groups
            shortest = min(group.duration_s + group.overhead_s for group in groups) if groups else 0.0
            best = max(best, shortest + self.min_tail_s(child))
        return best


class FrameIn(BaseModel):
    """One frame of the JSON batch form."""

    image_b64: str = Field(min_length=1)
    content_type: Literal["image/jpeg", "image/png"] = "image/jpeg"


class FramesIn(BaseModel):
    """JSON batch form of ``POST /v1/apps/{app}/frames``."""

    frames: list[FrameIn] = Field(min_length=1, max_length=10)


class FrameAccepted(BaseModel):
    request_id: str
    deadline: float  # epoch s
    modules: list[str]  # the root modules it was dispatched to


class FramesAccepted(BaseModel):
    app: str
    accepted: list[FrameAccepted]


class TaskOut(BaseModel):
    task_id: str
    module: str
    status: Literal["done", "dropped"]
    hardware: str
    emulated: bool
    enqueued_at: float
    started_at: float
    finished_at: float
    recorded_at: float | None = None  # when the worker issued the result write
    received_at: float | None = None  # when the worker received the task's message
    device_at: float | None = None  # when its batch got the device; finished_at - device_at is device time
    batch_size: int
    output: dict[str, Any] | None = None
    output_s3_key: str | None = None
    reason: str | None = None


class ResultOut(BaseModel):
    request_id: str
    app: str
    status: Literal["queued", "done", "dropped"]
    accepted_at: float
    deadline: float
    finished_at: float | None = None
    latency_s: float | None = None
    tasks: list[TaskOut] = Field(default_factory=list)


class ErrorOut(BaseModel):
    error: str
    reason: str


TaskMessage.model_rebuild()  # its lineage refers to TaskOut, defined after it
