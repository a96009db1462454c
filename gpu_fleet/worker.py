"""The worker: one process per planned machine (``python -m gpu_fleet.worker --worker-id ID``).

It reads its :class:`~functions.schema.Assignment` (module, config, queue) and the app's
:class:`~functions.schema.Deployment` from the config table, long-polls its queue, assembles
batches per the dispatch schedule (:mod:`gpu_fleet.batching`), drops early what can no longer meet
its deadline, runs the batch (:mod:`gpu_fleet.runtimes`), records results idempotently, forwards
each result to the downstream modules through the same dispatch library as the front, and emits
metrics. SIGTERM: the batch in hand is finished, everything still buffered is released
(ChangeMessageVisibility 0).
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from functions.adapters.results import TaskRecord
from functions.errors import DataPlaneError
from functions.routing import child_count, child_region
from functions.schema import TaskMessage
from gpu_fleet.batching import BatchAssembler, Pending

if TYPE_CHECKING:
    from collections.abc import Callable

    from functions.adapters.blobs import BlobStore
    from functions.adapters.metrics import Metrics
    from functions.adapters.queues import Received, TaskQueues
    from functions.adapters.results import ResultStore
    from functions.routing import Router
    from functions.schema import Assignment
    from gpu_fleet.runtimes import Runtime

__all__ = ["BatchOutcome", "Worker", "main"]

log = logging.getLogger("skinflint.worker")


@dataclass
class BatchOutcome:
    batch_id: int
    ran: int = 0
    dropped: int = 0
    duplicates: int = 0
    forwarded: int = 0


@dataclass
class Worker:
    assignment: Assignment
    router: Router
    queues: TaskQueues
    results: ResultStore
    blobs: BlobStore
    metrics: Metrics
    runtime: Runtime
    grace_s: float = 0.02
    output_inline_limit_bytes: int = 64 * 1024
    clock: Callable[[], float] = time.time
    io_threads: int = 3
    crash_after_record: bool = False  # tests: die between recording and deleting (SQS redelivers)

    def __post_init__(self) -> None:
        a = self.assignment
        self.assembler = BatchAssembler(a.batch, self.grace_s)
        self._lock = threading.Condition()
        self._model_slots = threading.BoundedSemaphore(a.concurrency)
        self._stopping = threading.Event()
        self._dims = {"App": a.app, "Module": a.module, "Hardware": a.hardware}
        dep = self.router.deployment
        self._tail_s = dep.min_tail_s(a.module)
        self._children = dep.children(a.module)
        self._batches_run: set[int] = set()
        self.totals: dict[str, int] = {"ran": 0, "dropped": 0, "duplicates": 0, "forwarded": 0, "poison": 0}

    # -- receiving ---------------------------------------------------------------------------------
    def accept(self, received: list[Received]) -> int:
        """Parse and buffer received messages; a malformed one stays in the queue (it reaches the
        DLQ after maxReceiveCount receives) and is counted."""
        now = self.clock()
        n = 0
        with self._lock:
            for r in received:
                try:
                    msg = TaskMessage.parse(r.body)
                except ValueError:
                    self.totals["poison"] += 1
                    self.metrics.put("PoisonMessages", 1, **self._dims)
                    log.warning("unparseable message left for the DLQ (receive %d)", r.receive_count)
                    continue
                self.assembler.add(msg, r.receipt, now)
                n += 1
            self._lock.notify_all()
        return n

    def poll_once(self, wait_s: int = 1) -> int:
        return self.accept(self.queues.receive(self.assignment.queue_url, wait_s=wait_s))

    # -- executing ---------------------------------------------------------------------------------
    def run_ready(self, now: float | None = None) -> list[BatchOutcome]:
        with self._lock:
            ready = self.assembler.take_ready(self.clock() if now is None else now)
        return [self.process(bid, items) for bid, items in ready]

    def process(self, batch_id: int, items: list[Pending]) -> BatchOutcome:
        a = self.assignment
        out = BatchOutcome(batch_id)
        start = self.clock()
        run: list[Pending] = []
        records: list[TaskRecord] = []
        for p in items:
            m = p.message
            if start + a.duration_s + self._tail_s > m.deadline:  # Nexus early drop
                records.append(self._record(m, "dropped", start, start, len(items), (), reason="deadline"))
                out.dropped += 1
            else:
                run.append(p)
        outputs: list[dict[str, Any]] = []
        if run:
            inputs = [self.runtime.prepare(self._payload(p.message), p.message.region) for p in run]
            with self._model_slots:  # the model's copies; the I/O below runs outside them
                outputs = self.runtime.run(inputs)
        done = self.clock()
        children: dict[str, list[tuple[TaskMessage, int]]] = {}
        for p, output in zip(run, outputs, strict=True):
            m = p.message
            ids: list[str] = []
            for child, fan in self._children:
                n = child_count(m.idempotency_key, child, fan)
                children.setdefault(child, []).extend((m, k) for k in range(n))
                ids += [f"{m.task_id}/{child}.{k}" for k in range(n)]
            records.append(self._record(m, "done", start, done, len(run), tuple(ids), output=output))
        # record first (conditional writes: the idempotency gate), then forward: a frame reads as
        # done only when every task reachable from its roots has an item
        _, repeats = self.results.record_tasks(records)
        out.ran = len(run)
        out.duplicates = len(repeats)
        out.forwarded = self._forward(children, enqueued_at=done)
        if self.crash_after_record:
            raise SystemExit("crash injected after recording")
        self.queues.delete(a.queue_url, [r for p in items for r in p.receipts])
        self._metrics(items, run, records, out, start, done)
        with self._lock:
            self._batches_run.add(batch_id)
            for k in ("ran", "dropped", "duplicates", "forwarded"):
                self.totals[k] += getattr(out, k)
        return out

    def _payload(self, m: TaskMessage) -> bytes:
        if m.payload.inline_b64 is not None:
            return base64.b64decode(m.payload.inline_b64)
        assert m.payload.s3_key is not None
        return self.blobs.get(m.payload.s3_key)

    def _record(
        self,
        m: TaskMessage,
        status: str,
        start: float,
        done: float,
        batch_size: int,
        children: tuple[str, ...],
        output: dict[str, Any] | None = None,
        reason: str | None = None,
    ) -> TaskRecord:
        output_json = json.dumps(output, separators=(",", ":")) if output is not None else None
        s3_key = None
        if output_json is not None and len(output_json) > self.output_inline_limit_bytes:
            s3_key = f"outputs/{m.request_id}/{m.task_id.replace('/', '_')}.json"
            self.blobs.put(s3_key, output_json.encode(), "application/json")
            output_json = None
        return TaskRecord(
            request_id=m.request_id,
            task_id=m.task_id,
            module=m.module,
            status=status,
            hardware=self.assignment.hardware,
            emulated=self.runtime.emulated,
            enqueued_at=m.enqueued_at,
            started_at=start,
            finished_at=done,
            batch_size=batch_size,
            children=children,
            output_json=output_json,
            output_s3_key=s3_key,
            reason=reason,
        )

    def _forward(self, children: dict[str, list[tuple[TaskMessage, int]]], enqueued_at: float) -> int:
        """Send each child request to its machine's queue (at least once: a redelivered parent
        forwards again; the child's conditional count makes the duplicate harmless). A child is
        routed by the time it is sent; its module latency counts from its parent's finish, so the
        result write before forwarding is inside the child's measured latency."""
        n = 0
        at = self.clock()
        for child, reqs in children.items():
            by_queue: dict[str, list[TaskMessage]] = {}
            for (m, k), route in zip(reqs, self.router.route_burst(child, at, len(reqs)), strict=True):
                msg = self.router.task(
                    route,
                    request_id=m.request_id,
                    task_id=f"{m.task_id}/{child}.{k}",
                    accepted_at=m.accepted_at,
                    enqueued_at=enqueued_at,
                    deadline=m.deadline,
                    payload=m.payload,
                    region=child_region(m.idempotency_key, child, k),
                )
                by_queue.setdefault(route.queue_url, []).append(msg)
            for url, msgs in by_queue.items():
                self.queues.send(url, msgs)
                n += len(msgs)
        return n

    def _metrics(
        self,
        items: list[Pending],
        run: list[Pending],
        records: list[TaskRecord],
        out: BatchOutcome,
        start: float,
        done: float,
    ) -> None:
        put, dims = self.metrics.put, self._dims
        for r in records:
            if r.status == "done":
                put("ModuleLatencyMs", (r.finished_at - r.enqueued_at) * 1e3, "Milliseconds", **dims)
        for p in items:
            put("QueueWaitMs", (start - p.message.enqueued_at) * 1e3, "Milliseconds", **dims)
        if run:
            put("BatchFill", len(run) / self.assignment.batch, "None", **dims)
            put("BatchMs", (done - start) * 1e3, "Milliseconds", **dims)
        put("Drops", out.dropped, **dims)
        put("Duplicates", out.duplicates, **dims)

    def count_empty_slots(self, t_from: float, t_to: float) -> int:
        """Windows of this machine that closed in [t_from, t_to) without a request."""
        schedule = self.router.schedule(self.assignment.module)
        if schedule is None:
            return 0
        origin = self.router.deployment.origin_s
        slots = schedule.slots_for_machine(
            self.assignment.group, self.assignment.machine, t_from - origin, t_to - origin
        )
        return sum(1 for s in slots if s.batch_id not in self._batches_run)

    # -- the loop ----------------------------------------------------------------------------------
    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()

    def _receive_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.poll_once(wait_s=1)
            except DataPlaneError as exc:
                log.warning("receive failed: %s", exc)
                time.sleep(0.5)

    def serve(self, heartbeat: Callable[[dict[str, Any]], None] | None = None, report_s: float = 5.0) -> None:
        """Run until :meth:`stop`; then release what is still buffered."""
        receiver = threading.Thread(target=self._receive_loop, name="receiver", daemon=True)
        receiver.start()
        if heartbeat:
            heartbeat({"ready": True, "at": self.clock(), "emulated": self.runtime.emulated, **self.totals})
        last_report = self.clock()
        # ``concurrency`` copies of the model run at once (``_model_slots``); the extra threads do the
        # I/O of finished batches (result writes, forwarding, deletes) while the model runs the next
        threads = self.assignment.concurrency + self.io_threads
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="batch") as pool:
            while not self._stopping.is_set():
                with self._lock:
                    nxt = self.assembler.next_close()
                    delay = 0.25 if nxt is None else max(0.0, nxt - self.clock())
                    if delay > 0:
                        self._lock.wait(timeout=min(delay, 0.25))
                    ready = self.assembler.take_ready(self.clock())
                for bid, items in ready:
                    pool.submit(self._process_logged, bid, items)
                now = self.clock()
                if now - last_report >= report_s:
                    self._report(last_report, now - self.grace_s, heartbeat)
                    last_report = now
        self._shutdown(receiver)

    def _process_logged(self, batch_id: int, items: list[Pending]) -> None:
        try:
            self.process(batch_id, items)
        except DataPlaneError as exc:  # the batch's messages stay in flight: SQS redelivers them
            log.error("batch %d failed, left for redelivery: %s", batch_id, exc)
        except Exception:  # a model or decode failure: same, and the DLQ catches a poison request
            log.exception("batch %d failed, left for redelivery", batch_id)

    def _report(self, t_from: float, t_to: float, heartbeat: Callable[[dict[str, Any]], None] | None) -> None:
        self.metrics.put("InstanceSeconds", t_to - t_from, "Seconds", **self._dims)
        try:
            self.metrics.put("EmptySlots", self.count_empty_slots(t_from, t_to), **self._dims)
        except Exception as exc:  # noqa: BLE001 - a metric must never stop serving
            log.warning("empty-slot count failed: %s", exc)
        if len(self._batches_run) > 10_000:
            self._batches_run.clear()
        if heartbeat:
            try:
                heartbeat({"ready": True, "at": t_to, "emulated": self.runtime.emulated, **self.totals})
            except DataPlaneError as exc:
                log.warning("heartbeat failed: %s", exc)

    def _shutdown(self, receiver: threading.Thread) -> None:
        receiver.join(timeout=3)
        released = self.release_buffered()
        log.info("stopped: %s, released %d", self.totals, released)

    def release_buffered(self) -> int:
        """Give every buffered (not yet run) message back to the queue at once."""
        with self._lock:
            left = self.assembler.drain()
        receipts = [r for p in left for r in p.receipts]
        if receipts:
            self.queues.release(self.assignment.queue_url, receipts)
            self.metrics.put("Released", len(receipts), **self._dims)
        return len(receipts)


def build_worker(worker_id: str) -> tuple[Worker, Any, Metrics]:
    """Wire a worker from the environment (config table, clients, runtime)."""
    from functions.adapters.blobs import BlobStore
    from functions.adapters.config_store import ConfigStore
    from functions.adapters.metrics import CloudWatchMetrics
    from functions.adapters.queues import TaskQueues
    from functions.adapters.results import ResultStore
    from functions.errors import ConfigError
    from functions.routing import Router
    from functions.settings import DataPlaneConfig, make_client
    from gpu_fleet.runtimes import make_runtime

    cfg = DataPlaneConfig.from_env()
    ddb = make_client("dynamodb", cfg)
    store = ConfigStore(ddb, cfg.config_table)
    assignment = store.get_assignment(worker_id)
    deployment = store.get_deployment(assignment.app)
    if deployment is None:
        raise ConfigError(f"app {assignment.app!r} is not deployed", key=f"app#{assignment.app}")
    metrics = CloudWatchMetrics(make_client("cloudwatch", cfg), cfg.metrics_namespace)
    worker = Worker(
        assignment=assignment,
        router=Router.for_deployment(deployment),
        queues=TaskQueues(make_client("sqs", cfg)),
        results=ResultStore(ddb, cfg.results_table),
        blobs=BlobStore(make_client("s3", cfg), cfg.bucket),
        metrics=metrics,
        runtime=make_runtime(assignment),
        output_inline_limit_bytes=cfg.output_inline_limit_bytes,
    )
    return worker, store, metrics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_fleet.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--worker-id", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s worker {args.worker_id} %(levelname)s %(message)s"
    )
    try:
        worker, store, metrics = build_worker(args.worker_id)
    except DataPlaneError as exc:
        print(f"worker {args.worker_id}: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    signal.signal(signal.SIGINT, lambda *_: worker.stop())
    metrics.start()
    try:
        worker.serve(heartbeat=lambda info: store.put_heartbeat(args.worker_id, info))
    finally:
        metrics.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
