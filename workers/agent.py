"""The instance agent: the loop of one fleet instance (run by ``python -m workers.instance``).

It applies the planner's decisions; it decides nothing itself.

0. **Before a claim** (while it holds no slot): the ``before_claim`` hook (:mod:`workers.onsite`)
   checks that a GPU class runs on the provider it asks for and measures the models planned on its
   class that are not measured there yet. A :class:`~workers.runtimes.ProviderError` refuses every
   claim: the heartbeat says ``refused`` and why.

1. **Claim**: reads the current plan version (the pointer's hint, every ``poll_s``: an eventually
   consistent read while nothing changes, ``PlanStore.current_hinted``), claims a slot of the
   version's packed fleet for its hardware (a conditional write in the plan store; the slot it
   served before is preferred) and runs every share of the slot: one :class:`~workers.worker.
   Worker` per share, each on its machine's queue from the app's deployment, all on ONE
   :class:`~workers.worker.Device` (batches of different shares take the device in the order
   their windows close). An instance without a free slot idles, says so in its heartbeat and
   claims again every ``recheck_s`` and on every new version.
2. **Version change**: a new version is claimed at once (same slot when possible). A share whose
   queue and configuration are unchanged keeps its worker (no reload); a new share's model is
   loaded and its worker started BEFORE anything old stops. From ``activate_at`` every worker
   forwards children with the new version's routing (also a retiring share of an app the new
   version gives this instance no share of: its children must reach served queues); an old share
   is served until the new
   version is active, ``retire_grace_s`` has passed and its queue is empty, then stopped. Nothing
   is deleted unprocessed: a stopping worker finishes its batch in hand and releases the rest.
   A share whose queue was deleted under it (the worker logs it and stops) is accounted for, not
   restarted: a retiring one counts as retired, one of the version in force is reported
   (``lost_shares`` in the heartbeat) until a new version gives its slot a queue again.
   The control loop moves ``activate_at`` earlier once every slot of the version is served: the
   agent re-reads it on every poll (and heartbeats at once after adopting, which is what shows
   its slot served). A version superseded before it activated (the new one's ``previous`` is older)
   is never activated: the front keeps serving ``previous`` until the new one activates, and no old
   share retires while an adopted version is still pending.
3. **Drain** (SIGTERM, the Auto Scaling termination hook, a Spot notice; :mod:`workers.lifecycle`):
   stop receiving, finish the batches in hand, release everything buffered, release the slot
   claims, complete the lifecycle action, log and report how long it took.
4. **After a crash** (``receipts_dir``; :mod:`workers.receipts`): every worker journals the receipts
   it holds; the agent, when it starts and before any worker, releases what its previous process's
   journals still hold, so those messages are served at once rather than after the visibility
   timeout (during which the front counts them as backlog). A worker thread that dies is replaced
   after its pending deletes are sent and the rest of what it held is released.

Heartbeats (plan store, ``instance#<id>``, an ``InstanceStatus``): instance id, hardware, state
(``starting``, ``idle``, ``serving``, ``draining``, ``gone``), slot, newest version adopted and every
version still served (``serving_versions``: old shares retire after the change; the garbage
collector keeps each of them and their queues), per-share totals, shares whose queue was deleted
under them (``lost_shares``), and the drain's figures once it has drained.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from core.adapters.queues import queue_gone
from core.errors import DataPlaneError, QueueError
from core.routing import Router
from workers.lifecycle import DrainNotice, LifecycleError
from workers.receipts import ReceiptJournal, release_left
from workers.runtimes import ProviderError
from workers.shares import RuntimeCache, ShareRunner, WorkerServices, assignment_for, runner_key
from workers.worker import Device, Worker

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from core.schema import Assignment, Deployment
    from planner.packing import Instance, Share
    from workers.lifecycle import LifecycleWatcher

__all__ = ["DrainReport", "InstanceAgent", "PlanSource"]

log = logging.getLogger("skinflint.instance")


class PlanSource(Protocol):
    """What the agent reads of the versioned plan store (``core.adapters.plan_store``)."""

    def current_hinted(self) -> Any:
        """The manifest the pointer names (``version``, ``activate_at``), None before any plan: the
        poll of :meth:`core.adapters.plan_store.PlanStore.current_hinted` (an eventually consistent
        read of a hint while nothing changes; never older than what it returned before)."""

    def deployment(self, version: int, app: str) -> Deployment | None: ...

    def claim(
        self, version: int, instance_id: str, hardware: str, prefer_slot: str | None
    ) -> Instance | None:
        """This instance's slot of ``version`` (the one it holds already, else a free one)."""

    def release(self, version: int, instance_id: str) -> Any:
        """Drop this instance's claims in ``version``."""


@dataclass
class DrainReport:
    reason: str
    seconds: float
    released: int
    batches_finished: int
    completed_lifecycle: bool
    window_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "drain_s": round(self.seconds, 3),
            "released": self.released,
            "batches_finished": self.batches_finished,
            "completed_lifecycle": self.completed_lifecycle,
            "window_s": None if self.window_s is None else round(self.window_s, 1),
        }


@dataclass
class _Pending:
    """A version adopted but not active yet: at ``activate_at`` the routers switch."""

    version: int
    activate_at: float
    routers: dict[str, Router]
    kept: list[ShareRunner]


@dataclass
class InstanceAgent:
    instance_id: str
    hardware: str
    plans: PlanSource
    services: WorkerServices
    resolve: Callable[[Deployment, Share], tuple[str, str, str | None, int]]
    runtimes: RuntimeCache = field(default_factory=RuntimeCache)
    heartbeat: Callable[[dict[str, Any]], None] | None = None
    complete_lifecycle: Callable[[str], None] | None = None  # CompleteLifecycleAction for this instance
    watcher: LifecycleWatcher | None = None
    poll_s: float = 1.0
    recheck_s: float = 10.0
    report_s: float = 5.0  # s between heartbeats (and InstanceSeconds)
    retire_grace_s: float = 2.0
    retire_quiet_s: float = 1.0
    clock: Callable[[], float] = time.time
    # called with a plan version before a claim while this instance holds no slot (workers.onsite:
    # the provider check and the on-instance profiling); a ProviderError refuses every claim
    before_claim: Callable[[int], None] | None = None
    # where the workers journal the receipts they hold (workers/receipts.py), one directory per
    # instance; None: no journal (a crash leaves the messages in hand to the visibility timeout)
    receipts_dir: Path | None = None

    def __post_init__(self) -> None:
        self.device = Device()
        self.version: int | None = None
        self.slot: str | None = None
        self.state = "starting"
        self._runners: list[ShareRunner] = []
        self._claimed: set[int] = set()
        self._pending: list[_Pending] = []  # adopted versions not active yet, oldest first
        self._next_claim = 0.0
        self._last_report = 0.0
        self._routers: dict[tuple[str, int], Router] = {}
        self._notice: DrainNotice | None = None
        self._lost: dict[str, dict[str, Any]] = {}  # share -> version, queue, when its queue vanished
        self._wake = threading.Event()
        self.drain_report: DrainReport | None = None
        self.refused: str | None = None  # why this instance serves nothing (a ProviderError)
        self.released_at_start = 0  # messages a crashed process of this agent held, released at start

    # -- control ---------------------------------------------------------------------------------
    def request_drain(self, notice: DrainNotice) -> None:
        """Ask the agent to drain (safe from a signal handler or the lifecycle thread)."""
        if self._notice is None:
            self._notice = notice
        self._wake.set()

    @property
    def draining(self) -> bool:
        return self._notice is not None

    def step(self) -> None:
        """One control step: follow the pointer, switch at activation, retire, heartbeat."""
        now = self.clock()
        try:
            manifest = self.plans.current_hinted()
        except DataPlaneError as exc:
            log.warning("cannot read the plan pointer: %s", exc)
            manifest = None
        adopted = False
        if manifest is not None and not self.draining:
            new = manifest.version != self.version
            if self.refused is None and (new or (self.slot is None and now >= self._next_claim)):
                if self._prepare_claim(manifest):
                    self._adopt(manifest, now)
                    adopted = new
            self._reschedule(manifest, now)
        self._activate(now)
        self._reap_lost(now)
        self._retire(now)
        self._revive()
        if adopted or now - self._last_report >= self.report_s:
            self.report(now)  # at once after adopting: the heartbeat is what shows the slot served

    def release_left(self) -> int:
        """Release the messages the workers of a previous process of this agent held when it died
        (their receipt journals, :func:`workers.receipts.release_left`): they are served at once,
        not after the visibility timeout. Before any worker starts; :meth:`run` calls it."""
        if self.receipts_dir is None:
            return 0
        try:
            self.released_at_start = release_left(self.receipts_dir, self.services.queues)
        except OSError as exc:
            log.warning("cannot read the receipt journals in %s: %s", self.receipts_dir, exc)
            return 0
        if self.released_at_start:
            log.info("released %d message(s) the previous process held", self.released_at_start)
        return self.released_at_start

    def run(self) -> DrainReport:
        """Serve until a drain is requested; then drain and return the report."""
        self.release_left()
        if self.watcher is not None:
            try:  # restarted on an instance already leaving: drain at once, claim nothing
                notice = self.watcher.check()
            except LifecycleError as exc:
                log.warning("lifecycle check failed: %s", exc)
                notice = None
            if notice is not None:
                self.request_drain(notice)
            self.watcher.start(self.request_drain)
        while not self.draining:
            try:
                self.step()
            except DataPlaneError as exc:  # an adapter failed: keep serving, try again next step
                log.warning("control step failed: %s", exc)
            except Exception:  # a model that does not load, a bad plan: keep serving what runs
                log.exception("control step failed")
            self._wake.wait(self.poll_s)
        assert self._notice is not None
        return self.drain(self._notice)

    # -- adopting a version ----------------------------------------------------------------------
    def _prepare_claim(self, manifest: Any) -> bool:
        """The ``before_claim`` hook while no slot is held; False when it refused (claim nothing)."""
        if self.before_claim is None or self.slot is not None:
            return True
        try:
            self.before_claim(int(manifest.version))
        except ProviderError as exc:
            self.refused = str(exc)
            self.state = "refused"
            log.error("refusing to serve %s: %s; no slot will be claimed", self.hardware, exc)
            self._safe_heartbeat(self.clock())
            return False
        except DataPlaneError as exc:  # the plan could not be read: the claim goes on as without the hook
            log.warning("before the claim of v%s: %s", manifest.version, exc)
        except Exception:  # a bug, a model that does not load: claim as without the hook (it fails there)
            log.exception("before the claim of v%s", manifest.version)
        return True

    def _router(self, app: str, version: int) -> Router:
        key = (app, version)
        if key not in self._routers:
            dep = self.plans.deployment(version, app)
            if dep is None:
                raise DataPlaneError(f"plan v{version} has no deployment of {app!r}")
            self._routers[key] = Router.for_deployment(dep)
        return self._routers[key]

    def _adopt(self, manifest: Any, now: float) -> None:
        version = int(manifest.version)
        activate_at = float(getattr(manifest, "activate_at", 0.0) or 0.0)
        inst = self.plans.claim(version, self.instance_id, self.hardware, self.slot)
        if inst is not None:
            self._claimed.add(version)
        shares = list(inst.shares) if inst is not None else []
        # build first (models load here), stop nothing yet: a failure leaves the old shares serving
        routers = {planned_share.app: self._router(planned_share.app, version) for planned_share in shares}
        planned: list[tuple[Share, Assignment]] = [
            (
                planned_share,
                assignment_for(
                    planned_share, routers[planned_share.app].deployment, self.instance_id, self.resolve
                ),
            )
            for planned_share in shares
        ]
        # a retiring worker on the same queue and configuration is taken back rather than doubled
        current = {
            runner.key: runner for runner in sorted(self._runners, key=lambda runner: not runner.retiring)
        }
        kept: list[ShareRunner] = []
        started: list[ShareRunner] = []
        for share, assignment in planned:
            key = runner_key(assignment)
            if key in current:
                runner = current.pop(key)
                runner.share, runner.retiring, runner.empty_since = share, False, None
                kept.append(runner)
            else:
                started.append(self._start(share, assignment, routers[share.app], version))
        for share, _ in planned:  # a share the new version plans again is no longer lost
            self._lost.pop(f"{share.app}.{share.module}.g{share.group}.m{share.machine}", None)
        for runner in current.values():  # shares this instance no longer serves: until empty and active
            if not runner.retiring:
                runner.retiring = True
                runner.retire_after = max(activate_at, now) + self.retire_grace_s
        self._runners += started
        if inst is None:
            self._next_claim = now + self.recheck_s
        if version != self.version:
            previous = getattr(manifest, "previous", None)
            for pending in [
                pending for pending in self._pending if previous is None or pending.version > previous
            ]:
                log.info(
                    "v%d superseded before it activated (v%d follows v%s)", pending.version, version, previous
                )
                self._pending.remove(pending)
            self._pending.append(_Pending(version, activate_at, routers, kept))
        self.version, self.slot = version, inst.slot if inst is not None else None
        self.state = "serving" if inst is not None else "idle"
        log.info(
            "v%d: slot %s, %d share(s): %d kept, %d started, %d retiring; active at %+.1f s",
            version,
            self.slot or "none (idle)",
            len(planned),
            len(kept),
            len(started),
            sum(runner.retiring for runner in self._runners),
            activate_at - now,
        )

    def _start(self, share: Share, assignment: Assignment, router: Router, version: int) -> ShareRunner:
        services = self.services
        worker = Worker(
            assignment=assignment,
            router=router,
            queues=services.queues,
            results=services.results,
            blobs=services.blobs,
            metrics=services.metrics,
            runtime=self.runtimes.get(assignment),  # loads the model when it is new to this instance
            grace_s=services.grace_s,
            output_inline_limit_bytes=services.output_inline_limit_bytes,
            payload_inline_limit_bytes=services.payload_inline_limit_bytes,
            io_threads=services.io_threads,
            delete_linger_s=services.delete_linger_s,
            record_linger=services.record_linger,
            device=self.device,
            journal=self._journal(assignment.queue_url),
        )
        thread = threading.Thread(
            target=worker.serve, name=f"share-{assignment.module}.g{assignment.group}.m{assignment.machine}"
        )
        thread.daemon = True
        thread.start()
        return ShareRunner(runner_key(assignment), share, version, worker, thread)

    def _journal(self, queue_url: str) -> ReceiptJournal | None:
        if self.receipts_dir is None:
            return None
        try:
            return ReceiptJournal(self.receipts_dir, queue_url)
        except OSError as exc:  # serve without: a crash then leaves its messages to the timeout
            log.warning("no receipt journal in %s: %s", self.receipts_dir, exc)
            return None

    def _reschedule(self, manifest: Any, now: float) -> None:
        """Follow a moved activation of an adopted version (the control loop moves it earlier once
        the version's slots are served)."""
        at = float(getattr(manifest, "activate_at", 0.0) or 0.0)
        for pending in self._pending:
            if pending.version == manifest.version and pending.activate_at != at:
                log.info(
                    "v%d: activation moved from %+.1f s to %+.1f s",
                    pending.version,
                    pending.activate_at - now,
                    at - now,
                )
                pending.activate_at = at

    def _activate(self, now: float) -> None:
        """Versions whose ``activate_at`` has come, in order: kept workers take the new version's
        windows and routing; retiring ones forward their children where the new version serves.
        Once none is pending, retiring shares get ``retire_grace_s`` from now."""
        activated = False
        while self._pending and now >= self._pending[0].activate_at:
            activated = True
            pending = self._pending.pop(0)
            for runner in pending.kept:
                if runner in self._runners and runner.share.app in pending.routers:
                    runner.worker.retarget(pending.routers[runner.share.app])
                    runner.version = pending.version
            for runner in self._runners:
                if runner.retiring:
                    router = self._forward_router(runner.share.app, pending)
                    if router is not None:
                        runner.worker.forward_with(router)
            log.info("v%d active", pending.version)
            self._prune_routers()
        if activated and not self._pending:
            for runner in self._runners:
                if runner.retiring:
                    runner.retire_after = now + self.retire_grace_s

    def _forward_router(self, app: str, pending: _Pending) -> Router | None:
        """The routing a retiring share of ``app`` forwards with once ``pending`` is active: the
        version's, also when this instance serves no share of the app in it (no slot, or a slot of
        other apps). Without it the share's children would go to the superseded version's queues,
        whose consumers retire once empty (issue #28). None when the version does not deploy the
        app (its children keep the old routing; the collector moves what nothing consumes)."""
        router = pending.routers.get(app)
        if router is not None:
            return router
        try:
            return self._router(app, pending.version)
        except DataPlaneError as exc:
            log.warning(
                "v%d: no routing for %s (%s): old shares keep forwarding as before", pending.version, app, exc
            )
            return None

    def _retire(self, now: float) -> None:
        """Stop old shares that are done: new version active, grace passed, nothing buffered or
        in hand, and the queue seen empty for ``retire_quiet_s``."""
        done: list[ShareRunner] = []
        for runner in self._runners:
            if not runner.retiring or now < runner.retire_after or self._pending:
                continue  # an adopted version not active yet: the front may still dispatch to it
            if not runner.worker.idle() or self._depth(runner.worker.assignment.queue_url) != 0:
                runner.empty_since = None
                continue
            if runner.empty_since is None:
                runner.empty_since = now
            if now - runner.empty_since >= self.retire_quiet_s:
                done.append(runner)
        for runner in done:
            # the instance keeps running: the worker's receiver may finish its poll (up to 20 s on
            # an idle queue) after the worker stopped, giving back what it returns; this loop does
            # not wait for it
            runner.stop(wait_for_poll=False)
        for runner in done:
            runner.thread.join(timeout=10)
            self._runners.remove(runner)
            log.info(
                "retired %s (v%d): %s",
                runner.worker.assignment.worker_id,
                runner.version,
                runner.worker.totals,
            )
        if done:
            self.runtimes.keep_only([runner.worker.assignment for runner in self._runners])
            self._prune_routers()
        self._release_old_claims()

    def _reap_lost(self, now: float) -> None:
        """Remove the shares whose worker stopped because its queue was deleted under it. A retiring
        share is simply done; a share of a version still served is reported (``lost_shares``) and
        not restarted on a queue that does not exist (a new version starts it on its queue)."""
        lost = [
            runner for runner in self._runners if runner.worker.queue_gone and not runner.thread.is_alive()
        ]
        for runner in lost:
            assignment = runner.worker.assignment
            self._runners.remove(runner)
            for pending in self._pending:
                pending.kept = [kept for kept in pending.kept if kept is not runner]
            if runner.retiring:
                log.info(
                    "retired %s (v%d): its queue was deleted; %s",
                    assignment.worker_id,
                    runner.version,
                    runner.worker.totals,
                )
                continue
            name = f"{assignment.app}.{assignment.module}.g{assignment.group}.m{assignment.machine}"
            self._lost[name] = {"version": runner.version, "queue_url": assignment.queue_url, "at": now}
            log.error(
                "%s (v%d) stopped: its queue %s was deleted while the share is planned; it stays "
                "unserved until a new plan version",
                assignment.worker_id,
                runner.version,
                assignment.queue_url,
            )
        if lost:
            self.runtimes.keep_only([runner.worker.assignment for runner in self._runners])
            self._prune_routers()

    def _revive(self) -> None:
        """A share whose worker thread died (a bug, not a stop) gets a fresh worker on its queue."""
        for i, runner in enumerate(self._runners):
            if runner.thread.is_alive() or runner.retiring or runner.worker.queue_gone:
                continue  # a stopped share whose queue was deleted is reaped, never restarted
            log.error("%s stopped unexpectedly; restarting it", runner.worker.assignment.worker_id)
            runner.worker.release_held()
            fresh = self._start(runner.share, runner.worker.assignment, runner.worker.router, runner.version)
            fresh.worker.forward_with(runner.worker.forward_router)
            self._runners[i] = fresh
            for pending in self._pending:
                pending.kept = [fresh if kept is runner else kept for kept in pending.kept]

    def _prune_routers(self) -> None:
        """Forget the routers (schedules) of versions nothing uses any more."""
        used = {runner.version for runner in self._runners} | {pending.version for pending in self._pending}
        if self.version is not None:
            used.add(self.version)
        oldest = min(used, default=0)
        for key in [cached for cached in self._routers if cached[1] < oldest]:
            del self._routers[key]

    def _depth(self, url: str) -> int | None:
        """Messages in the queue; 0 once the garbage collector deleted it, None when unknown."""
        try:
            return int(self.services.queues.depth(url))
        except QueueError as exc:
            if queue_gone(exc):
                return 0
            log.warning("cannot read the depth of %s: %s", url, exc)
            return None

    def _release_old_claims(self) -> None:
        serving = {runner.version for runner in self._runners} | ({self.version} if self.slot else set())
        for version in sorted(self._claimed - serving):
            if version == self.version:
                continue
            try:
                self.plans.release(version, self.instance_id)
                self._claimed.discard(version)
            except DataPlaneError as exc:
                log.warning("cannot release the v%d claim: %s", version, exc)

    # -- draining --------------------------------------------------------------------------------
    def drain(self, notice: DrainNotice) -> DrainReport:
        """Stop receiving, finish the batches in hand, release everything buffered, release the
        claims, complete the lifecycle action. Returns the measured figures."""
        t0 = time.perf_counter()
        self.state = "draining"
        self._safe_heartbeat(self.clock())
        if self.watcher is not None:
            self.watcher.stop()
        before = sum(
            runner.worker.totals["ran"] + runner.worker.totals["dropped"] for runner in self._runners
        )
        for runner in self._runners:
            runner.stop()
        if self.services.record_linger is not None:  # what the batches in hand record goes at once
            self.services.record_linger.close()
        for runner in self._runners:
            runner.thread.join(timeout=60)
            if runner.thread.is_alive():
                log.error("%s did not stop within 60 s", runner.worker.assignment.worker_id)
        released = sum(runner.worker.totals["released"] for runner in self._runners)
        finished = (
            sum(runner.worker.totals["ran"] + runner.worker.totals["dropped"] for runner in self._runners)
            - before
        )
        for version in sorted(self._claimed):
            try:
                self.plans.release(version, self.instance_id)
            except DataPlaneError as exc:
                log.warning("cannot release the v%d claim: %s", version, exc)
        completed = self._complete(notice)
        took = time.perf_counter() - t0
        self.drain_report = DrainReport(notice.reason, took, released, finished, completed, notice.window_s)
        self.state = "gone"
        self.services.metrics.put(
            "DrainSeconds", took, "Seconds", Hardware=self.hardware, Reason=notice.reason
        )
        log.info(
            "drained (%s) in %.3f s: %d message(s) released, %d task(s) finished in hand, "
            "lifecycle completed: %s%s",
            notice.reason,
            took,
            released,
            finished,
            completed,
            f", window {notice.window_s:.0f} s" if notice.window_s is not None else "",
        )
        linger = self.services.record_linger
        if linger is not None:
            log.info(
                "record linger: %d write(s) for %d batch(es), slowest recent write %.3f s",
                linger.calls,
                linger.batches,
                linger.slow_write_s,
            )
        self._safe_heartbeat(self.clock())
        return self.drain_report

    def _complete(self, notice: DrainNotice) -> bool:
        """Complete the termination hook when the instance is held by one (the notice says so,
        or IMDS does when the drain came from SIGTERM)."""
        if self.complete_lifecycle is None:
            return False
        held = notice.reason == "scale-in"
        if not held and self.watcher is not None:
            try:
                later = self.watcher.check()
                held = later is not None and later.reason == "scale-in"
            except LifecycleError:
                held = False
        if not held:
            return False
        try:
            self.complete_lifecycle(self.instance_id)
        except LifecycleError as exc:
            log.warning("%s (the hook's timeout lets the instance go instead)", exc)
            return False
        return True

    # -- reporting -------------------------------------------------------------------------------
    def status(self, now: float) -> dict[str, Any]:
        shares = {}
        for runner in self._runners:
            assignment = runner.worker.assignment
            shares[f"{assignment.app}.{assignment.module}.g{assignment.group}.m{assignment.machine}"] = {
                "version": runner.version,
                "retiring": runner.retiring,
                "emulated": runner.worker.runtime.emulated,
                # what its queue's messages carry (core/wire.py): the control loop's backlog check
                # reads the queue in messages and converts with it (control/backlog.py)
                "tasks_per_message": round(runner.worker.queues.tasks_per_message(assignment.queue_url), 3),
                **runner.worker.totals,
            }
        info: dict[str, Any] = {
            "at": now,
            "instance_id": self.instance_id,
            "hardware": self.hardware,
            "state": self.state,
            "slot": self.slot,
            "version": self.version,
            "serving_versions": sorted({runner.version for runner in self._runners}),
            "shares": shares,
            "lost_shares": sorted(self._lost),
            "device_busy_s": round(self.device.busy_s, 3),
            "models_loaded": self.runtimes.loads,
        }
        if self.refused is not None:
            info["refused"] = self.refused
        if self.drain_report is not None:
            info["drain"] = self.drain_report.as_dict()
        return info

    def report(self, now: float) -> None:
        if self._last_report:
            self.services.metrics.put(
                "InstanceSeconds",
                now - self._last_report,
                "Seconds",
                Hardware=self.hardware,
                State=self.state,
            )
        self._last_report = now
        self._safe_heartbeat(now)

    def _safe_heartbeat(self, now: float) -> None:
        if self.heartbeat is None:
            return
        try:
            self.heartbeat(self.status(now))
        except DataPlaneError as exc:
            log.warning("heartbeat failed: %s", exc)
