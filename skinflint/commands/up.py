"""``skinflint up``: the local stack. moto's server on 127.0.0.1 (DynamoDB, SQS, S3, CloudWatch, Auto
Scaling), the apps registered with the profiles planned for this machine's hardware, the control loop
(the planner's epoch every ``--epoch`` seconds: observed rates, plan, pack, publish a version, size
one Auto Scaling group per hardware class), an emulated fleet (one instance-agent process per
instance of those groups) and the front API under uvicorn. Prints one line when ready (``--json``:
url, api_key, apps, aws_endpoint, region; ``aws_endpoint`` is moto's server, where any credentials
read the stack's tables, queues, bucket, metrics and groups) and runs until SIGINT/SIGTERM, then
drains and stops every process it started."""

from __future__ import annotations

import json
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from skinflint.commands.report import parse_duration
from skinflint.errors import UsageError
from skinflint.local.launch import DEFAULT_EPOCH_S, DEFAULT_RETENTION_S, make_stack

if TYPE_CHECKING:
    import argparse

    from skinflint.local.stack import StackInfo

DEFAULT_APP = "traffic"
DEFAULT_RATE = 4.0  # frames/s: what this 2-core machine drains with room to spare
RETENTION_MARGIN_S = 600.0  # s a --retention must exceed the run by (results are collected after it)


def add_stack_arguments(parser: argparse.ArgumentParser, multi_app: bool) -> None:
    if multi_app:
        parser.add_argument(
            "--app",
            action="append",
            dest="apps",
            metavar="APP",
            help=f"app to deploy (repeatable; default {DEFAULT_APP})",
        )
    else:
        parser.add_argument("--app", default=DEFAULT_APP, help=f"app to run (default {DEFAULT_APP})")
    parser.add_argument(
        "--rate",
        type=float,
        default=DEFAULT_RATE,
        help=f"frames/s the app is registered for; the control loop plans for at least this "
        f"(default {DEFAULT_RATE:g})",
    )
    parser.add_argument(
        "--epoch",
        type=float,
        default=DEFAULT_EPOCH_S,
        help=f"seconds between planning epochs (default {DEFAULT_EPOCH_S:g}; 60 when deployed)",
    )
    parser.add_argument(
        "--slo", type=float, default=None, help="end-to-end SLO in seconds (default: the app's)"
    )
    parser.add_argument(
        "--retention",
        type=parse_duration,
        default=None,
        help="how long the local stack keeps a frame's results and the metric data points, e.g. 30m, 2h "
        "(default: the run's length plus 1h; moto holds them in memory, about 0.4 GB an hour at 4 "
        "frames/s of traffic)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--log-dir", default=None, help="where the processes' logs go (default: a temp dir)")


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "up", help="run the local stack (moto + front + workers) until interrupted", description=__doc__
    )
    add_stack_arguments(parser, multi_app=True)
    parser.set_defaults(func=run)


def stack_retention(given: float | None, run_s: float = 0.0) -> float:
    """The local stack's retention (``--retention``), at least ``RETENTION_MARGIN_S`` past a run of
    ``run_s`` seconds (its frames' results are read after it); by default the run plus one hour."""
    need = run_s + RETENTION_MARGIN_S
    if given is None:
        return run_s + DEFAULT_RETENTION_S
    if given < need:
        raise UsageError(
            f"--retention must be at least the run plus {RETENTION_MARGIN_S / 60:g} min ({need:g} s): "
            f"results are read after it; got {given:g} s"
        )
    if given > 365 * 86_400:
        raise UsageError(f"--retention must be at most 365 days, got {given:g} s")
    return given


def _log_to_stderr(quiet: bool) -> Any:
    def log(msg: str) -> None:
        if not quiet:
            print(f"skinflint: {msg}", file=sys.stderr, flush=True)

    return log


def ready_line(info: StackInfo, as_json: bool) -> str:
    """The line printed once the stack serves: the front's URL and key, the apps, and the local AWS
    endpoint (moto) with its region."""
    if as_json:
        return json.dumps(info.as_json())
    return (
        f"Skinflint is up at {info.url}  api key {info.api_key}  apps {', '.join(info.apps)}  "
        f"AWS (moto) at {info.endpoint_url} region {info.region}  (Ctrl-C stops)"
    )


def run(args: argparse.Namespace) -> int:
    # CLI start-up: loaded when this command runs
    from core.errors import DataPlaneError
    from skinflint.local.stack import StackError

    apps = args.apps or [DEFAULT_APP]
    retention = stack_retention(args.retention)
    stack = make_stack(
        apps, args.rate, args.slo, _log_to_stderr(args.json), args.log_dir, args.epoch, retention
    )
    stop = threading.Event()
    previous = {
        signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        try:
            info = stack.start()
        except (DataPlaneError, StackError) as exc:
            raise UsageError(f"local stack failed to start: {exc}") from exc
        print(ready_line(info, args.json), flush=True)
        while not stop.wait(1.0):
            dead = [name for name in ("front", "moto") if name not in stack.alive()]
            if dead:
                raise UsageError(f"{', '.join(dead)} stopped unexpectedly (logs in {stack.log_dir})")
    finally:
        stack.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0
