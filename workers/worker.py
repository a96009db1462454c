"""The worker: serves one share (one planned machine of one module) of a fleet instance.

The instance agent (:mod:`workers.instance`) derives its :class:`~core.schema.Assignment` (module,
config, queue) from the slot it claimed and gives it the router of the app's
:class:`~core.schema.Deployment` in that plan version. The worker long-polls its queue, assembles
batches per the dispatch schedule (:mod:`workers.batching`), drops early what can no longer meet
its deadline, runs the batch (:mod:`workers.runtimes`), forwards each result to the downstream
modules through the same dispatch library as the front (the result travels in the children's
``lineage``; each child carries its crop of the frame, cut from the parent's decode: workers/crops.py),
records the batch's terminal tasks (one record per POST, core/adapters/results.py: in the results
table, or for an app whose results are pushed, a message on its results queue) and emits metrics.
A message may carry several tasks (:mod:`core.wire`): each becomes a request of its own (its
batch may differ from its message-mates'), and the message is deleted only once every task of it
has finished (run and recorded or forwarded, or dropped with a record); a task that failed
keeps its message in flight, so SQS redelivers all of it (the tasks that had finished are then
duplicates, checked as below). A processed message's delete may wait up to ``delete_linger_s``
(default 1 s, ``SKINFLINT_DELETE_LINGER_S``) to share one ``DeleteMessageBatch`` with up to nine
others: its results are already recorded, so a redelivery before the delete is a duplicate (checked
before it is recorded or counted again: its receive count is above 1, which marks every task of it),
and the linger is far below the queues' 30 s visibility timeout. The receive loop long-polls 1 s while
messages come and 20 s (SQS's maximum) once its queue has been empty for 30 s, so an idle share
costs three ``ReceiveMessage`` a minute rather than sixty. With a record linger
(:mod:`workers.recording`, shared by the instance's workers) a batch's records share one write with
other batches', at most ``linger_s`` later and never later than a frame's deadline less a margin; the
batch's messages are deleted only after that write returned. SIGTERM: the batch in hand is
finished, pending deletes are sent, the receive in flight is waited for (at most its poll: 20 s
for an idle worker) and what it returns is released with the rest: every message with a task
still buffered is released (ChangeMessageVisibility 0): its finished tasks come back as
duplicates. A queue deleted under the worker (the control loop's garbage collector removes a
superseded version's queues) is logged once: the worker stops receiving, runs what it already
holds and stops (``queue_gone``); it neither retries nor restarts on it.

The workers of one instance, one per share of its slot, run in one process and share one
:class:`~workers.device.Device`: their batches take the device in the order their windows close, as the fleet
packing assumes.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.adapters.outcomes import FrameOutcomes
from core.adapters.queues import queue_gone
from core.adapters.results import PushSink, TaskRecord, split_weight
from core.errors import DataPlaneError, QueueError
from core.routing import child_count
from core.settings import SQS_INLINE_LIMIT_BYTES
from planner.dispatch import PHASE_KEY
from workers.batch_metrics import BatchOutcome, _Dims, put_batch_metrics
from workers.batching import BatchAssembler, Pending
from workers.crops import Crop, child_boxes, cut_crops, message_child_input, open_frame
from workers.device import Device
from workers.poison import describe_error, poison_records
from workers.reporting import WorkerReporting
from workers.settling import MessageSettling

if TYPE_CHECKING:
    from collections.abc import Callable

    from core.adapters.blobs import BlobStore
    from core.adapters.metrics import Metrics
    from core.adapters.queues import Received, TaskQueues
    from core.adapters.results import ResultStore
    from core.routing import Router
    from core.schema import Assignment, TaskMessage
    from workers.receipts import ReceiptJournal
    from workers.recording import RecordLinger
    from workers.runtimes import Runtime

__all__ = ["BatchOutcome", "Device", "Worker"]

log = logging.getLogger("skinflint.worker")

#: The most bytes of a parent's output its children's messages carry inline (their ``lineage``); a
#: larger one is stored in S3 and they carry its key. With the frame inline (up to
#: ``SQS_INLINE_LIMIT_BYTES`` of base64) a child message keeps room for ten ancestors under SQS's 256 KiB.
LINEAGE_OUTPUT_INLINE_BYTES = 4 * 1024

#: threads a worker adds for its finished batches waiting for a shared record write (the record
#: linger, workers/recording.py): with a linger of L s a worker finishing B batches a second holds
#: about B x (L + the write) of them; 16 covers 100 batches/s at the default 0.1 s
LINGER_THREADS = 16

#: a request's prepared input, the seconds preparing it took, and its children's crops by (child, index)
_Prepared = tuple[Any, float, dict[tuple[str, int], Crop]]


@dataclass
class Worker(MessageSettling, WorkerReporting):
    assignment: Assignment
    router: Router
    queues: TaskQueues
    results: ResultStore
    blobs: BlobStore
    metrics: Metrics
    runtime: Runtime
    grace_s: float = 0.02
    output_inline_limit_bytes: int = 64 * 1024
    # bytes of base64 a child's crop may carry inline (the front's frame limit, SKINFLINT_INLINE_LIMIT_BYTES);
    # a larger crop goes to S3 (workers/crops.py)
    payload_inline_limit_bytes: int = SQS_INLINE_LIMIT_BYTES
    clock: Callable[[], float] = time.time
    io_threads: int = 3
    crash_after_record: bool = False  # tests: die between recording and deleting (SQS redelivers)
    device: Device = field(default_factory=Device)  # shared by the workers of one instance
    outcomes: FrameOutcomes | None = None  # frames' SLO / end-to-end metrics, by share (default: on metrics)
    emit_outcomes: bool = True  # False: no frame-outcome metrics
    max_receive_count: int = 5  # the queues' redrive maxReceiveCount (cdk constants, control.queues)
    # s a processed message's delete may wait to share a DeleteMessageBatch (0: at once; a serving
    # worker gets core.settings.DEFAULT_DELETE_LINGER_S from the instance agent).
    # Pending deletes go out when ten are pending, when the oldest has waited this long
    # (:meth:`serve`'s flusher), and at shutdown (:meth:`flush_deletes`).
    delete_linger_s: float = 0.0
    # decode and pre-process each request on a thread of its own as it arrives (started by
    # :meth:`serve`), so a batch's inputs are ready when its window closes and the device does not
    # wait for them; without it (tests calling :meth:`process`) a batch prepares its own inputs
    prepare_ahead: bool = True
    # the receipts it holds, on local disk (workers/receipts.py): the instance agent releases them
    # when it starts again after a crash, rather than letting them wait out the visibility timeout
    journal: ReceiptJournal | None = None
    # writes the records of several batches in one call (workers/recording.py; shared by the workers
    # of an instance, which the agent gives ``SKINFLINT_RECORD_LINGER_S``); None: each batch at once
    record_linger: RecordLinger | None = None
    # the receive loop's long poll: ``busy_wait_s`` while messages come, ``idle_wait_s`` (SQS's
    # maximum) once ``idle_after_s`` have passed without one: an idle queue costs a ReceiveMessage
    # every 20 s rather than every second. A stop waits for the poll in flight (:meth:`_shutdown`):
    # at most ``idle_wait_s``, and only for a worker idle that long
    busy_wait_s: int = 1
    idle_wait_s: int = 20
    idle_after_s: float = 30.0

    def __post_init__(self) -> None:
        assignment = self.assignment
        mp = self.router.deployment.plan.modules.get(assignment.module)
        # a module whose phase the packer fixed takes turns with the other shares of its instance
        # (aligned duty cycle): its batches must not start before their window ends, even when full
        aligned = mp is not None and PHASE_KEY in (mp.model_extra or {})
        self.assembler = BatchAssembler(assignment.batch, self.grace_s, hold_full=aligned)
        self._lock = threading.Condition()
        self._stopping = threading.Event()
        self._gone = threading.Event()  # the queue was deleted under the worker: stop once idle
        self._dims: _Dims = {
            "App": assignment.app,
            "Module": assignment.module,
            "Hardware": assignment.hardware,
        }
        self._forward_router = self.router
        dep = self.router.deployment
        self._tail_s = dep.min_tail_s(assignment.module)
        self._children = dep.children(assignment.module)
        self._batches_run: set[int] = set()
        self._in_hand = 0  # batches taken from the assembler and not finished yet
        self._last_received = time.monotonic()  # when a receive last returned a message
        self._poll_ends = 0.0  # monotonic time by which the receive in flight returns
        self._wait_for_poll = True  # a stop waits for the receive in flight (stop(wait_for_poll=...))
        self._receives: dict[str, int] = {}  # idempotency key -> SQS receive count (poison path)
        self._to_delete: list[str] = []  # receipts of processed messages not deleted yet
        # receipt -> idempotency keys of its message's tasks not finished yet (under _lock); a
        # receipt leaves it (and is deleted) when the last one finishes
        self._unfinished: dict[str, set[str]] = {}
        self._failed: set[str] = set()  # receipts with a failed task: left for redelivery, not deleted
        self._released: set[str] = set()  # receipts given back while a task of theirs was in hand
        self._to_delete_since = 0.0  # clock() when the oldest of them was added
        self._delete_lock = threading.Lock()
        # idempotency key -> its prepared input, the seconds preparing it took and its children's
        # crops (workers/crops.py), while buffered
        self._prepared: dict[str, Future[_Prepared]] = {}
        self._prepare_lock = threading.Lock()
        self._preparer: ThreadPoolExecutor | None = None
        self._push_sink: PushSink | None = None  # a push app's results queue (core/adapters/results.py)
        self._device_s = 0.0  # seconds this worker's batches held the device (its report's DeviceSeconds)
        self._device_reported = 0.0
        if self.outcomes is None and self.emit_outcomes:
            self.outcomes = FrameOutcomes(self.metrics)
        self.receives = 0  # ReceiveMessage calls of the receive loop
        self.totals: dict[str, int] = {
            "ran": 0, "dropped": 0, "duplicates": 0, "forwarded": 0, "poison": 0, "released": 0,
        }  # fmt: skip

    def forward_with(self, router: Router) -> None:
        """Route the children of every batch finished from now on with ``router`` (a newer plan
        version: once it is active, its queues are the ones served). The worker's own windows
        (batch size, empty-slot count) stay those of its assignment."""
        self._forward_router = router
        dep = router.deployment
        if self.assignment.module in dep.plan.modules:
            self._tail_s = dep.min_tail_s(self.assignment.module)
            self._children = dep.children(self.assignment.module)

    @property
    def forward_router(self) -> Router:
        """The routing children are forwarded with (the assignment's, or a newer version's)."""
        return self._forward_router

    def retarget(self, router: Router) -> None:
        """Serve the same queue and configuration under a newer plan version: its windows (empty
        slots) and its routing both come from ``router`` from now on."""
        self.router = router
        self.forward_with(router)

    @property
    def queue_gone(self) -> bool:
        """The worker's queue no longer exists: it stopped (or stops once what it holds has run)."""
        return self._gone.is_set()

    def _check_gone(self, exc: DataPlaneError, op: str) -> bool:
        """Whether ``exc`` says the worker's queue was deleted; the first time, log it and stop
        receiving. Its messages went with it: nothing can be received, deleted or released there."""
        if not isinstance(exc, QueueError) or exc.queue_url != self.assignment.queue_url:
            return False
        if not queue_gone(exc):
            return False
        with self._lock:  # the receiver and a batch thread may both find it out: log once
            first = not self._gone.is_set()
            self._gone.set()
            held = len(self.assembler)
            self._lock.notify_all()
        if first:
            log.warning(
                "%s: queue %s no longer exists (%s failed); stopping this share once the %d "
                "request(s) it holds have run",
                self.assignment.worker_id,
                self.assignment.queue_url,
                op,
                held,
            )
        return True

    def idle(self) -> bool:
        """Nothing buffered and no batch in hand (the queue itself may still hold messages)."""
        with self._lock:
            return len(self.assembler) == 0 and self._in_hand == 0

    # -- receiving ---------------------------------------------------------------------------------
    def accept(self, received: list[Received]) -> int:
        """Decode and buffer received messages, one request per task; a malformed one stays in the
        queue (it reaches the DLQ after maxReceiveCount receives) and is counted. Returns the
        tasks buffered."""
        if self.journal is not None:
            self.journal.held(received_one.receipt for received_one in received)
        now = self.clock()
        count = 0
        poison: list[tuple[Received, ValueError]] = []
        delays: list[float] = []
        accepted: list[TaskMessage] = []
        with self._lock:
            # received while stopping: given straight back (below). Checked under the lock that
            # release_buffered drains under: what a poll returns is either buffered before the
            # drain (and released by it) or released here, never left in the assembler
            late = self._stopping.is_set()
            if len(self._receives) > 20_000:  # receive counts matter only while a request is in hand
                self._receives.clear()
            for received_one in () if late else received:
                try:
                    msgs = received_one.messages()
                except ValueError as exc:
                    self.totals["poison"] += 1
                    self.metrics.put("PoisonMessages", 1, **self._dims)
                    log.warning(
                        "unparseable message left for the DLQ (receive %d)", received_one.receive_count
                    )
                    poison.append((received_one, exc))
                    continue
                self._unfinished[received_one.receipt] = {msg.idempotency_key for msg in msgs}
                for msg in msgs:
                    self.assembler.add(msg, received_one.receipt, now)
                    # a redelivered message: every task of it may have been recorded or forwarded
                    self._receives[msg.idempotency_key] = received_one.receive_count
                    accepted.append(msg)
                    if received_one.receive_count <= 1:  # a redelivery waited out a visibility timeout
                        delays.append(now - msg.enqueued_at)
                count += len(msgs)
            self._lock.notify_all()
        if late:
            self._release([received_one.receipt for received_one in received])
            return 0
        if count:
            self.queues.observe(self.assignment.queue_url, count, len(received) - len(poison))
        self._prepare_ahead(accepted)
        self._hop_metrics(delays)
        for received_one, err in poison:
            self._record_poison(received_one, err)
        return count

    # -- preparing inputs ahead ------------------------------------------------------------------
    def _prepare_ahead(self, messages: list[TaskMessage]) -> None:
        """Start preparing each newly buffered request (payload fetch, decode, crop, resize) on the
        preparer thread; a redelivery of a buffered request reuses its first preparation."""
        preparer = self._preparer
        if preparer is None or not messages:
            return
        with self._prepare_lock:
            if len(self._prepared) > 20_000:  # left by batches that failed: they prepare again
                self._prepared.clear()
            for msg in messages:
                if msg.idempotency_key not in self._prepared:
                    self._prepared[msg.idempotency_key] = preparer.submit(self._prepare_timed, msg)

    def _prepare_timed(self, message: TaskMessage) -> _Prepared:
        """Fetch and prepare the request's input, and cut its children's crops from the same decode
        (workers/crops.py); a module without children, or a payload that is not a JPEG/PNG under the
        pixel cap, cuts none (its children carry the payload and their region)."""
        t0 = time.perf_counter()
        data = self._payload(message)
        boxes = child_boxes(message.idempotency_key, self._children)
        frame = None
        if boxes:
            try:
                frame = open_frame(data)
            except ValueError:  # not an image we decode: the runtime's prepare decides (below)
                frame = None
        prepare_frame = getattr(self.runtime, "prepare_frame", None)
        if frame is not None and prepare_frame is not None:
            prepared = prepare_frame(frame.image, message.region)
        else:
            prepared = self.runtime.prepare(data, message.region)
        crops: dict[tuple[str, int], Crop] = {}
        if frame is not None:
            cut = cut_crops(frame, [region for _, _, region in boxes])
            crops = {(child, index): crop for (child, index, _), crop in zip(boxes, cut, strict=True)}
        return prepared, time.perf_counter() - t0, crops

    def _take_prepared(self, message: TaskMessage) -> _Prepared:
        """The request's input: prepared ahead (waiting for it if it is still being prepared), else
        prepared now. Raises what preparing it raised (a request that does not decode)."""
        with self._prepare_lock:
            future = self._prepared.pop(message.idempotency_key, None)
        if future is None:
            return self._prepare_timed(message)
        return future.result()

    def _forget_prepared(self, messages: list[TaskMessage]) -> None:
        with self._prepare_lock:
            for msg in messages:
                future = self._prepared.pop(msg.idempotency_key, None)
                if future is not None:
                    future.cancel()

    # -- poison messages (workers/poison.py) ------------------------------------------------------
    def _record_poison(self, received: Received, exc: ValueError) -> None:
        """An undecodable message: record each task of it that names its request as dropped with
        the reason (the frame's owner reads it); the message itself goes on to the DLQ."""
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        recs = poison_records(
            received.body,
            why,
            self.assignment.module,
            self.assignment.hardware,
            self.runtime.emulated,
            self.clock(),
        )
        if not recs:
            return
        try:
            fresh, _ = self._record_tasks(recs, linger=False)  # on the receiver's thread: not held
            self._observe_outcomes(fresh)
        except (DataPlaneError, ValueError) as e:
            log.warning("cannot record poison message of %s: %s", recs[0].key, e)

    def _batch_failed(self, batch_id: int, items: list[Pending], exc: BaseException) -> None:
        """A failed batch stays in flight (SQS redelivers it; the DLQ takes it after
        ``max_receive_count`` receives). A batch of several is retried one request at a time, so a
        poison request does not take its batch-mates with it; a request failing on its last
        receive is recorded as dropped with the reason, so its frame is answered."""
        if len(items) > 1:
            for pending in items:
                try:
                    self.process(batch_id, [pending])
                except Exception as one:  # noqa: BLE001 - each request's failure is handled alone
                    self._batch_failed(batch_id, [pending], one)
            return
        self._finish(items, failed=True)
        for pending in items:
            tries = self._receives.get(pending.message.idempotency_key, 1)
            if tries < self.max_receive_count:
                continue
            now = self.clock()
            rec = self._record(
                pending.message,
                "dropped",
                now,
                now,
                1,
                (),
                reason=f"failed {tries} times: {describe_error(exc)}",
                recheck=True,
            )
            try:
                fresh, _ = self._record_tasks([rec])
                self._observe_outcomes(fresh)
                self.metrics.put("PoisonMessages", 1, **self._dims)
            except DataPlaneError as e:
                log.warning("cannot record the failure of %s: %s", rec.key, e)

    def _observe_outcomes(self, records: list[TaskRecord]) -> None:
        """Emit the outcome share of each terminal task written (core/adapters/outcomes.py)."""
        if self.outcomes is not None:
            self.outcomes.submit(records)

    def poll_once(self, wait_s: int = 1) -> int:
        return self.accept(self.queues.receive(self.assignment.queue_url, wait_s=wait_s))

    def receive_wait_s(self) -> int:
        """The next receive's long poll: ``busy_wait_s`` until ``idle_after_s`` have passed since a
        receive last returned a message, ``idle_wait_s`` after."""
        idle = time.monotonic() - self._last_received >= self.idle_after_s
        return self.idle_wait_s if idle else self.busy_wait_s

    # -- executing ---------------------------------------------------------------------------------
    def run_ready(self, now: float | None = None) -> list[BatchOutcome]:
        with self._lock:
            ready = self.assembler.take_ready(self.clock() if now is None else now)
            self._in_hand += len(ready)
        return [self._process_counted(bid, items) for bid, items in ready]

    def _process_counted(self, batch_id: int, items: list[Pending]) -> BatchOutcome:
        try:
            return self.process(batch_id, items)
        finally:
            with self._lock:
                self._in_hand -= 1
                self._lock.notify_all()

    def process(self, batch_id: int, items: list[Pending]) -> BatchOutcome:
        assignment = self.assignment
        out = BatchOutcome(batch_id)
        start = self.clock()
        run: list[Pending] = []
        records: list[TaskRecord] = []
        for pending in items:
            message = pending.message
            if start + assignment.duration_s + self._tail_s > message.deadline:  # Nexus early drop
                records.append(
                    self._record(
                        message,
                        "dropped",
                        start,
                        start,
                        len(items),
                        (),
                        reason="deadline",
                        received_at=pending.received_at,
                        recheck=self._redelivered(message),
                    )
                )
                out.dropped += 1
            else:
                run.append(pending)
        running = {id(pending) for pending in run}
        self._forget_prepared([pending.message for pending in items if id(pending) not in running])
        outputs: list[dict[str, Any]] = []
        device_at: float | None = None
        prepare_s = prepare_wait_s = 0.0
        crops: dict[str, dict[tuple[str, int], Crop]] = {}  # parent key -> its children's crops
        if run:
            waited = time.perf_counter()
            inputs = []
            for pending in run:
                prepared, took, cut = self._take_prepared(pending.message)
                inputs.append(prepared)
                prepare_s += took
                crops[pending.message.idempotency_key] = cut
            prepare_wait_s = time.perf_counter() - waited  # what the preparation added to the batch
            close_at = min(pending.message.window_end for pending in run)
            with self.device.slot(close_at, assignment.concurrency):  # the I/O below runs outside it
                device_at = self.clock()
                outputs = self.runtime.run(inputs)
        done = self.clock()
        children: dict[str, list[tuple[TaskMessage, int, TaskRecord]]] = {}
        parents: list[TaskRecord] = []  # every task run (written or carried by its children)
        for pending, output in zip(run, outputs, strict=True):
            message = pending.message
            counts = [
                (child, child_count(message.idempotency_key, child, fan)) for child, fan in self._children
            ]
            ids = tuple(f"{message.task_id}/{child}.{index}" for child, n in counts for index in range(n))
            rec = self._record(
                message,
                "done",
                start,
                done,
                len(run),
                ids,
                output=output,
                received_at=pending.received_at,
                device_at=device_at,
                recheck=self._redelivered(message),
                inline_limit=min(self.output_inline_limit_bytes, LINEAGE_OUTPUT_INLINE_BYTES)
                if ids
                else None,
            )
            parents.append(rec)
            if ids:  # its result travels with its children (their lineage): it is not written
                for child, n in counts:
                    children.setdefault(child, []).extend((message, index, rec) for index in range(n))
            else:
                records.append(rec)
        # forward first, then record the terminal tasks (one record per POST of the batch). The
        # children are on their way while the records are written, so the write is not in their
        # latency. A redelivery forwards again (at least once: a child's id is fixed, and readers
        # count each task once; the copies are marked to be checked before they count).
        out.forwarded = self._forward(children, enqueued_at=done, crops=crops)
        fresh, repeats = self._record_tasks(records)
        out.ran = len(run)
        out.duplicates = len(repeats)
        if self.crash_after_record:
            raise SystemExit("crash injected after recording")
        self._delete(self._finish(items))
        recorded = [rec for rec in records if rec.status != "done"] + parents
        put_batch_metrics(self.metrics, self._dims, self.assignment, items, run, recorded, out, start, done)
        if device_at is not None:
            self._device_metrics(done - device_at, prepare_s, prepare_wait_s)
        # a repeat is not emitted again: its first delivery emitted it, unless that worker died between
        # the write and the emission (then its buffered metrics died with it anyway: metrics are best
        # effort; the records, which the sweeper accounts from, are not)
        self._observe_outcomes(fresh)
        with self._lock:
            self._batches_run.add(batch_id)
            for counter in ("ran", "dropped", "duplicates", "forwarded"):
                self.totals[counter] += getattr(out, counter)
        return out

    def _record_tasks(
        self, records: list[TaskRecord], linger: bool = True
    ) -> tuple[list[TaskRecord], list[TaskRecord]]:
        """Record terminal tasks where the app's results go (its deployment's ``results``): the
        results table (pull), or the app's results queue (push: :class:`~core.adapters.results.PushSink`,
        nothing written to the table). With a record linger (and ``linger``) they share a call with
        other batches' records (workers/recording.py); either way this returns once they are
        written. Returns (written, repeats)."""
        dep = self._forward_router.deployment
        sink: ResultStore | PushSink = self.results
        if dep.results == "push" and dep.results_queue:
            push = self._push_sink
            if push is None or push.queue_url != dep.results_queue:
                push = self._push_sink = PushSink(self.queues, dep.results_queue, clock=self.clock)
            sink = push
        if linger and self.record_linger is not None:
            return self.record_linger.record(sink, records)
        return sink.record_tasks(records)

    def _payload(self, message: TaskMessage) -> bytes:
        if message.payload.inline_b64 is not None:
            return base64.b64decode(message.payload.inline_b64)
        assert message.payload.s3_key is not None
        return self.blobs.get(message.payload.s3_key)

    def _record(
        self,
        message: TaskMessage,
        status: str,
        start: float,
        done: float,
        batch_size: int,
        children: tuple[str, ...],
        output: dict[str, Any] | None = None,
        reason: str | None = None,
        received_at: float | None = None,
        device_at: float | None = None,
        recheck: bool = False,
        inline_limit: int | None = None,
    ) -> TaskRecord:
        """The task's record; an output over ``inline_limit`` bytes (default the worker's
        ``output_inline_limit_bytes``) is stored in S3 and the record carries its key."""
        output_json = json.dumps(output, separators=(",", ":")) if output is not None else None
        s3_key = None
        limit = self.output_inline_limit_bytes if inline_limit is None else inline_limit
        if output_json is not None and len(output_json) > limit:
            s3_key = f"outputs/{message.request_id}/{message.task_id.replace('/', '_')}.json"
            self.blobs.put(s3_key, output_json.encode(), "application/json")
            output_json = None
        return TaskRecord(
            request_id=message.request_id,
            task_id=message.task_id,
            module=message.module,
            status=status,
            hardware=self.assignment.hardware,
            emulated=self.runtime.emulated,
            enqueued_at=message.enqueued_at,
            started_at=start,
            finished_at=done,
            batch_size=batch_size,
            children=children,
            output_json=output_json,
            output_s3_key=s3_key,
            reason=reason,
            received_at=received_at,
            device_at=device_at,
            app=message.app,
            accepted_at=message.accepted_at,
            deadline=message.deadline,
            weight=message.weight,
            lineage=tuple(message.lineage),
            recheck=recheck or message.recheck,
        )

    def _redelivered(self, message: TaskMessage) -> bool:
        """Whether the message was received before (it may have been recorded, or forwarded)."""
        return message.recheck or self._receives.get(message.idempotency_key, 1) > 1

    def _forward(
        self,
        children: dict[str, list[tuple[TaskMessage, int, TaskRecord]]],
        enqueued_at: float,
        crops: dict[str, dict[tuple[str, int], Crop]] | None = None,
    ) -> int:
        """Send each child request to its machine's queue (at least once: a redelivered parent
        forwards again, its children marked ``recheck``; readers count a task id once). A child is
        routed by the time it is sent; its module latency counts from its parent's finish (the
        parent's result write comes after the forward, outside it)."""
        count = 0
        at = self.clock()
        router = self._forward_router
        sends: dict[str, list[TaskMessage]] = {}
        for child, reqs in children.items():
            burst = router.route_burst(child, at, len(reqs), parent=self.assignment.module)
            for (message, index, parent), route in zip(reqs, burst, strict=True):
                payload, region = message_child_input(
                    message,
                    child,
                    index,
                    (crops or {}).get(message.idempotency_key, {}).get((child, index)),
                    blobs=self.blobs,
                    inline_limit_bytes=self.payload_inline_limit_bytes,
                )
                msg = router.task(
                    route,
                    request_id=message.request_id,
                    task_id=f"{message.task_id}/{child}.{index}",
                    accepted_at=message.accepted_at,
                    enqueued_at=enqueued_at,
                    deadline=message.deadline,
                    payload=payload,
                    region=region,
                    weight=split_weight(message.weight, len(parent.children)),
                    lineage=[*message.lineage, parent.task_out(recorded_at=enqueued_at)],
                    recheck=parent.recheck,
                )
                sends.setdefault(route.queue_url, []).append(msg)
                count += 1
        self.queues.send_many(sends)  # every child queue at once: none waits for another's send
        return count

    # -- the loop ----------------------------------------------------------------------------------
    def stop(self, wait_for_poll: bool = True) -> None:
        """Stop serving (:meth:`serve` returns once the batches in hand are done). ``wait_for_poll``:
        :meth:`serve` also waits for the receive in flight (up to ``idle_wait_s``), which a process
        about to exit needs (a drain); a share retired on a running instance does not (False): its
        receiver thread lives on until the poll returns, and gives back what it returns."""
        self._wait_for_poll = wait_for_poll
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()

    def warm(self) -> None:
        """Open the connections the first batch would otherwise open (a read of a missing result,
        the depth of its own queue and of every queue it forwards to, while the receiver holds a
        connection in its long poll): the share is ready only after this. Best effort."""
        try:
            self.results.warm()
            self.queues.depth(self.assignment.queue_url)
            dep = self._forward_router.deployment
            for child, _ in self._children:
                for url in dep.queues.get(child, {}).values():
                    self.queues.depth(url)
        except Exception as exc:  # noqa: BLE001 - what is not warm stays lazy
            log.warning("warm-up stopped early: %s", exc)

    def _receive_loop(self) -> None:
        while not self._stopping.is_set() and not self._gone.is_set():
            try:
                wait_s = self.receive_wait_s()
                self._poll_ends = time.monotonic() + wait_s
                received = self.queues.receive(self.assignment.queue_url, wait_s=wait_s)
                self.receives += 1
                self.accept(received)
                if received:
                    self._last_received = time.monotonic()
            except DataPlaneError as exc:
                if self._check_gone(exc, "receive"):
                    return
                log.warning("receive failed: %s", exc)
                time.sleep(0.5)

    def serve(self, heartbeat: Callable[[dict[str, Any]], None] | None = None, report_s: float = 5.0) -> None:
        """Run until :meth:`stop`; then release what is still buffered."""
        if self.prepare_ahead:
            self._preparer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prepare")
        receiver = threading.Thread(target=self._receive_loop, name="receiver", daemon=True)
        receiver.start()
        self.warm()
        if heartbeat:
            heartbeat({"ready": True, "at": self.clock(), "emulated": self.runtime.emulated, **self.totals})
        # reports (heartbeat write, empty-slot count) on their own thread: in this loop they would
        # hold back the batches that become ready meanwhile
        reporter = threading.Thread(
            target=self._report_loop, args=(heartbeat, report_s), name="reporter", daemon=True
        )
        reporter.start()
        if self.delete_linger_s > 0:
            threading.Thread(target=self._flush_loop, name="delete-flusher", daemon=True).start()
        # ``concurrency`` copies of the model run at once (``_model_slots``); the extra threads do the
        # I/O of finished batches (result writes, forwarding, deletes) while the model runs the next.
        # With a record linger a finished batch's thread waits up to the linger for its write (which
        # costs no CPU): LINGER_THREADS more, so the batches behind it do not queue for a thread
        threads = self.assignment.concurrency + self.io_threads
        if self.record_linger is not None:
            threads += LINGER_THREADS
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="batch") as pool:
            while not self._stopping.is_set() and not (self._gone.is_set() and self.idle()):
                with self._lock:
                    nxt = self.assembler.next_close()
                    delay = 0.25 if nxt is None else max(0.0, nxt - self.clock())
                    if delay > 0:
                        self._lock.wait(timeout=min(delay, 0.25))
                    ready = self.assembler.take_ready(self.clock())
                    self._in_hand += len(ready)
                for bid, items in ready:
                    pool.submit(self._process_logged, bid, items)
        self._stopping.set()  # also when the queue went away: the reporter and late receives stop
        reporter.join(timeout=3)
        self._shutdown(receiver)

    def _process_logged(self, batch_id: int, items: list[Pending]) -> None:
        try:
            self._process_counted(batch_id, items)
        except DataPlaneError as exc:  # the batch's messages stay in flight: SQS redelivers them
            log.error("batch %d failed, left for redelivery: %s", batch_id, exc)
            self._batch_failed(batch_id, items, exc)
        except Exception as exc:  # a model or decode failure: same, and the DLQ catches a poison request
            log.exception("batch %d failed, left for redelivery", batch_id)
            self._batch_failed(batch_id, items, exc)

    def _shutdown(self, receiver: threading.Thread) -> None:
        self.flush_deletes()  # every batch has finished (the pool is closed): its deletes go now
        # the receive in flight returns by _poll_ends (an idle worker's 20 s poll, else 1 s): waited
        # for, so that what it returns is released (accept) before this process may exit; a
        # message SQS handed to a poll nobody reads would wait out the visibility timeout
        poll_left = max(0.0, self._poll_ends - time.monotonic())
        receiver.join(timeout=poll_left + 3 if self._wait_for_poll else min(3.0, poll_left + 3))
        if receiver.is_alive():  # still in flight: what it returns is released by accept()
            log.log(
                logging.WARNING if self._wait_for_poll else logging.DEBUG,
                "receiver still in a long poll at shutdown",
            )
        released = self.release_buffered()
        if self.journal is not None:
            self.journal.close()
        if self._preparer is not None:
            self._preparer.shutdown(wait=False, cancel_futures=True)
        emitted = self.outcomes.emitted if self.outcomes is not None else 0.0
        log.info(
            "stopped: %s, released %d, outcomes of %.2f frames emitted, %d receive(s)",
            self.totals,
            released,
            emitted,
            self.receives,
        )
