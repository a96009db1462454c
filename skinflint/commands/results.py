"""``skinflint results APP [--follow] [--json]``: read a push app's results from its results queue.

An app whose spec says ``"results": "push"`` does not keep its results for ``GET /v1/requests/{id}``
(which answers 409 ``results_pushed``): its workers send each batch's records to the app's results
queue (``skinflint-<APP>-results``), and this command is a consumer of it. It receives the
messages, decodes them (:func:`core.adapters.results.decode_pushed`), assembles each frame from its
terminal tasks (:class:`core.adapters.results.PushedFrames`: a frame is printed once, when the shares
of its terminal tasks sum to one, or when the control loop's sweep lists it past its deadline
unfinished: ``dropped``, reason ``stranded``) and deletes them. One line per frame: request id,
status, latency (s from acceptance), and a summary of its terminal tasks' results; ``--json``: one
JSON object per line, the frame as ``GET /v1/requests/{id}`` answers a pull app's.

Without ``--follow`` it stops when a receive finds the queue empty, and prints the frames it
received only part of (status ``queued``: their other records were not in the queue yet; they are
deleted, so a later run prints the rest apart). ``--follow`` keeps receiving (20 s long polls)
until interrupted. A message that does not decode is left in the queue (after 5 receives it goes to
the app's dead-letter queue) and named on stderr. Several consumers may share the queue; each frame
is then assembled by the one that receives all its records, so run one consumer per app, or use
the decode function in your own program.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from skinflint.commands.apps import add_endpoint, aws_errors, data_config
from skinflint.errors import UsageError

if TYPE_CHECKING:
    from core.schema import ResultOut
    from core.settings import DataPlaneConfig


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "results",
        help="read a push app's results from its results queue",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("app", metavar="APP", help="the app (its spec says results: push)")
    parser.add_argument("--follow", action="store_true", help="keep receiving until interrupted")
    parser.add_argument("--json", action="store_true", help="one JSON object per frame and line")
    add_endpoint(parser)
    parser.set_defaults(func=run)


def results_queue(cfg: DataPlaneConfig, app: str) -> str:
    """The results queue URL of ``app`` in the plan version serving now; :class:`UsageError` when the
    app is not deployed or does not push its results."""
    # CLI start-up: loaded when this command runs
    import time

    from core.adapters.plan_store import PlanStore
    from core.clients import make_client

    plans = PlanStore(make_client("dynamodb", cfg), cfg.config_table)
    current = plans.current()
    dep = plans.deployment(current.serving(time.time()), app) if current is not None else None
    if dep is None:
        raise UsageError(f"no app named {app!r} is deployed")
    if dep.results != "push" or not dep.results_queue:
        raise UsageError(
            f"{app} keeps its results to read (results: pull): GET /v1/requests/{{id}}, not a results queue"
        )
    return dep.results_queue


def summary(res: ResultOut) -> str:
    """A frame's terminal tasks in a few words: ``car.0 {"label":3,...}; car.1 dropped (deadline)``."""
    parts = []
    for task in res.tasks:
        if task.status == "dropped":
            parts.append(f"{task.task_id} dropped ({task.reason})")
        elif task.output is not None:
            text = json.dumps(task.output, separators=(",", ":"))
            parts.append(f"{task.task_id} {text if len(text) <= 60 else text[:57] + '...'}")
        elif task.output_s3_key:
            parts.append(f"{task.task_id} s3:{task.output_s3_key}")
    return "; ".join(parts)


def line(res: ResultOut) -> str:
    latency = f"{res.latency_s:8.3f} s" if res.latency_s is not None else "       - s"
    return f"{res.request_id}  {res.status:8}  {latency}  {summary(res)}"


def consume(queues: Any, url: str, follow: bool, emit: Any, warn: Any) -> int:
    """Receive, decode, assemble and delete until the queue is empty (or forever with ``follow``);
    ``emit(result)`` each frame finished; returns the frames emitted. The frames partly received
    are emitted at the end (without ``follow``)."""
    # CLI start-up: loaded when this command runs
    from core.adapters.results import PushedFrames, decode_pushed
    from core.errors import ResultStoreError

    frames = PushedFrames()
    count = 0
    while True:
        received = queues.receive(url, wait_s=20 if follow else 1)
        if not received and not follow:
            break
        done: list[str] = []
        for message in received:
            try:
                decoded = decode_pushed(message.body)
            except ResultStoreError as exc:
                warn(f"message left in the queue (the DLQ after 5 receives): {exc}")
                continue
            for res in frames.add(decoded):
                emit(res)
                count += 1
            done.append(message.receipt)
        if done:
            queues.delete(url, done)
    for res in frames.pending():
        emit(res)
        count += 1
    return count


def run(args: argparse.Namespace) -> int:
    # CLI start-up: loaded when this command runs
    from core.adapters.queues import TaskQueues
    from core.clients import make_client

    cfg = data_config(args.endpoint)
    with aws_errors(f"cannot read the results of {args.app}"):
        url = results_queue(cfg, args.app)
        queues = TaskQueues(make_client("sqs", cfg))

        def emit(res: ResultOut) -> None:
            print(res.model_dump_json() if args.json else line(res), flush=True)

        consume(queues, url, args.follow, emit, lambda text: print(f"skinflint: {text}", file=sys.stderr))
    return 0
