"""Why an instance must drain, and telling Auto Scaling that it has (mechanism; the agent decides).

Three triggers end an instance's service, all handled the same way by the instance agent (stop
receiving, finish the batch in hand, release what is buffered, release the slot claim):

- **SIGTERM / SIGINT** (systemd stopping the service, the local fleet emulator's scale-in);
- **the Auto Scaling termination lifecycle hook**: a scale-in holds the instance in
  ``Terminating:Wait`` and IMDS ``meta-data/autoscaling/target-lifecycle-state`` turns
  ``Terminated``; once drained the agent calls ``CompleteLifecycleAction`` (CONTINUE) so the
  instance goes at once instead of at the hook's heartbeat timeout;
- **a Spot interruption notice**: IMDS ``meta-data/spot/instance-action`` appears (404 until then)
  two minutes before EC2 reclaims the instance, with the action time.

IMDS is read with IMDSv2 (a session token from ``PUT /latest/api/token``) by :class:`ImdsClient`;
tests and the local fleet emulator point it at a fake server (``base_url``) or inject any object
with ``get(path)``. :class:`LifecycleWatcher` polls it on a daemon thread and reports the first
notice once.
"""

from __future__ import annotations

import calendar
import json
import logging
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from core.adapters._aws import AWS_ERRORS
from workers.errors import WorkerError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "IMDS_URL",
    "SPOT_NOTICE_S",
    "AutoScalingCompleter",
    "DrainNotice",
    "Imds",
    "ImdsClient",
    "LifecycleError",
    "LifecycleWatcher",
    "install_signal_handlers",
]

log = logging.getLogger("skinflint.lifecycle")

IMDS_URL = "http://169.254.169.254"  # the instance metadata service on EC2
SPOT_NOTICE_S = 120.0  # s: EC2 gives a Spot instance two minutes between the notice and the reclaim
TARGET_STATE_PATH = "autoscaling/target-lifecycle-state"
SPOT_ACTION_PATH = "spot/instance-action"

Reason = Literal["sigterm", "scale-in", "spot"]


class LifecycleError(WorkerError):
    """IMDS or the Auto Scaling API could not be reached or answered something unexpected."""


@dataclass(frozen=True)
class DrainNotice:
    """Why the instance drains; ``deadline`` (epoch s) is when it will be gone, when known."""

    reason: Reason
    seen_at: float
    deadline: float | None = None
    detail: str = ""

    @property
    def window_s(self) -> float | None:
        """Seconds between the notice and the deadline (Spot: about 120)."""
        return None if self.deadline is None else self.deadline - self.seen_at


class Imds(Protocol):
    def get(self, path: str) -> str | None:
        """``meta-data/<path>`` as text, None when IMDS answers 404 (nothing there)."""


class ImdsClient:
    """IMDSv2: a session token (PUT, TTL header) then GETs with the token header. The token is
    reused until 90 % of its TTL and fetched again after a 401."""

    def __init__(
        self,
        base_url: str = IMDS_URL,
        timeout_s: float = 1.0,
        token_ttl_s: int = 21_600,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.token_ttl_s = token_ttl_s
        self._clock = clock
        self._token: tuple[str, float] | None = None

    def _fetch_token(self) -> str:
        req = urllib.request.Request(
            f"{self.base_url}/latest/api/token",
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": str(self.token_ttl_s)},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as response:
                token = str(response.read().decode())
        except (urllib.error.URLError, OSError) as exc:
            raise LifecycleError(f"IMDS token request to {self.base_url} failed: {exc}") from exc
        self._token = (token, self._clock() + 0.9 * self.token_ttl_s)
        return token

    def _get_with(self, token: str, path: str) -> tuple[int, str]:
        req = urllib.request.Request(
            f"{self.base_url}/latest/meta-data/{path}", headers={"X-aws-ec2-metadata-token": token}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), ""
        except (urllib.error.URLError, OSError) as exc:
            raise LifecycleError(f"IMDS GET {path} failed: {exc}") from exc

    def get(self, path: str) -> str | None:
        token = self._token[0] if self._token and self._token[1] > self._clock() else self._fetch_token()
        status, body = self._get_with(token, path)
        if status == 401:  # the token expired or IMDS restarted: one fresh token, one retry
            status, body = self._get_with(self._fetch_token(), path)
        if status == 404:
            return None
        if status != 200:
            raise LifecycleError(f"IMDS GET {path} answered HTTP {status}")
        return body.strip()

    def instance_id(self) -> str:
        iid = self.get("instance-id")
        if not iid:
            raise LifecycleError("IMDS has no instance-id")
        return iid


def _parse_spot_time(doc: str, now: float) -> float:
    """The epoch second of a Spot ``instance-action`` document's ``time`` (ISO 8601, UTC);
    ``now + 120`` when it is missing or unreadable (the documented notice period)."""
    try:
        raw = str(json.loads(doc).get("time", ""))
        return float(calendar.timegm(time.strptime(raw, "%Y-%m-%dT%H:%M:%SZ")))
    except (ValueError, TypeError, AttributeError):
        return now + SPOT_NOTICE_S


class LifecycleWatcher:
    """Polls IMDS for a Spot interruption notice and for the termination lifecycle hook; reports
    the first notice once through ``on_notice`` (from its daemon thread).

    ``hook_timeout_s`` is the lifecycle hook's heartbeat timeout: the deadline a scale-in notice
    carries (the instance is terminated then, drained or not)."""

    def __init__(
        self,
        imds: Imds,
        poll_s: float = 1.0,
        hook_timeout_s: float = 300.0,
        clock: Callable[[], float] = time.time,
    ):
        self.imds = imds
        self.poll_s = poll_s
        self.hook_timeout_s = hook_timeout_s
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0

    def check(self) -> DrainNotice | None:
        """One poll: the Spot notice first (the shorter deadline), then the lifecycle hook."""
        now = self._clock()
        action = self.imds.get(SPOT_ACTION_PATH)
        if action:
            return DrainNotice("spot", now, _parse_spot_time(action, now), detail=action)
        state = self.imds.get(TARGET_STATE_PATH)
        if state == "Terminated":
            return DrainNotice("scale-in", now, now + self.hook_timeout_s, detail=state)
        return None

    def start(self, on_notice: Callable[[DrainNotice], None]) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                try:
                    notice = self.check()
                except LifecycleError as exc:
                    self.errors += 1
                    if self.errors in (1, 10) or self.errors % 100 == 0:
                        log.warning("lifecycle poll failed (%d so far): %s", self.errors, exc)
                    notice = None
                if notice is not None:
                    on_notice(notice)
                    return
                self._stop.wait(self.poll_s)

        self._thread = threading.Thread(target=loop, name="lifecycle", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * self.poll_s + 1)


def install_signal_handlers(
    on_notice: Callable[[DrainNotice], None], clock: Callable[[], float] = time.time
) -> None:
    """SIGTERM and SIGINT become a ``sigterm`` notice (main thread only, as Python requires)."""

    def handler(signum: int, _frame: Any) -> None:
        on_notice(DrainNotice("sigterm", clock(), detail=signal.Signals(signum).name))

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


class AutoScalingCompleter:
    """Tells Auto Scaling that a drained instance may go: ``CompleteLifecycleAction`` (CONTINUE)
    on the termination hook. Injected client (boto3 ``autoscaling``)."""

    def __init__(self, client: Any, group_name: str, hook_name: str):
        self._asg = client
        self.group_name = group_name
        self.hook_name = hook_name

    def complete(self, instance_id: str) -> None:
        try:
            self._asg.complete_lifecycle_action(
                LifecycleHookName=self.hook_name,
                AutoScalingGroupName=self.group_name,
                InstanceId=instance_id,
                LifecycleActionResult="CONTINUE",
            )
        except AWS_ERRORS as exc:
            raise LifecycleError(
                f"CompleteLifecycleAction for {instance_id} on {self.group_name} failed: {exc}"
            ) from exc
