"""Locust users: one camera class per demo app, posting real JPEG frames in batches and collecting results.

A user is a camera: it produces ``SKINFLINT_FPS_PER_USER`` frames/s of the generated video
(:mod:`skinflint.local.video`, JPEG, nothing downloaded) and posts them ``N`` at a time, one POST
every ``N / SKINFLINT_FPS_PER_USER`` seconds holding its last ``N`` frames, from its own phase
(random, or ``SKINFLINT_PHASES=even``), with the API key from ``SKINFLINT_API_KEY`` in
``x-api-key``. ``N`` is ``SKINFLINT_FRAMES_PER_POST`` (1-10), or by default (0) the frames of half
the app's SLO at the camera's rate, within 1-10 (``skinflint demo``'s rule; the SLO is read from
``GET /v1/apps`` at test start). Several frames go as the JSON batch form
``{"frames": [{"image_b64": ...}, ...]}``, one alone as its ``image/jpeg`` body. A POST refused as
larger than the app's plan can ever take (503 ``batch_too_large``) is sent again split into POSTs
of the ``max_frames`` the front names, and every later POST to that app is split the same way.

Each frame of a POST is one outcome: the POST's status for each (429/503 shed all its frames), and
each accepted frame's request id (the ``accepted`` list, in frame order) is collected by a greenlet
that reads ``GET /v1/requests/{id}`` once its SLO has passed, then 1, 2, 4 ... s later until it is
done or dropped (or the test ends); with ``SKINFLINT_COLLECT=after``, every result is read once the
run and its drain are over instead. A frame's end-to-end latency (the server's: from its accept) is
reported to locust as a ``FRAME`` request named ``e2e <app>`` (a dropped or lost frame as a
failure), and every frame's outcome is written as one JSON line to ``SKINFLINT_LOADTEST_OUT`` when
the test stops (``loadtest/analysis.py`` turns them into RPS, failures, latency percentiles and SLO
attainment).

Shedding (429/503) is a locust failure named ``shed <status> <error>``; a POST split on
``batch_too_large`` one named ``split 503 batch_too_large``; any other non-2xx is a failure named
by its status and error code.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import os
import random
import time
from typing import Any, ClassVar

import gevent
from gevent.pool import Group, Pool
from locust import HttpUser, events, task

from loadtest.rates import LoadPlan
from skinflint.local.video import synthetic_frames

__all__ = ["ActdetUser", "CameraUser", "CaptionUser", "FaceUser", "PoseUser", "TrafficUser"]

log = logging.getLogger("skinflint.loadtest")

API_KEY = os.environ.get("SKINFLINT_API_KEY", "")
OUT_PATH = os.environ.get("SKINFLINT_LOADTEST_OUT", "")
N_FRAMES = 64  # frames of generated video per process, cycled
POLL_S = 1.0  # s before the second read of a frame not finished at its SLO (then doubling)
PHASES = os.environ.get("SKINFLINT_PHASES", "random")
COLLECT = os.environ.get("SKINFLINT_COLLECT", "during")  # or "after": read every result once the run ends
_CAMERAS = itertools.count()
_PLAN = LoadPlan.from_env()

OUTCOMES: list[dict[str, Any]] = []
POLLERS = Group()
SLOS: dict[str, float] = {}  # app -> SLO (s), read from GET /v1/apps at test start
MOST: dict[str, int] = {}  # app -> frames per POST the front takes (lowered by 503 batch_too_large)
_FRAMES: list[bytes] = []
_STATE = {"stopping": False}


def frames() -> list[bytes]:
    if not _FRAMES:
        _FRAMES.extend(synthetic_frames(N_FRAMES))
    return _FRAMES


class CameraUser(HttpUser):
    """Posts the frames of one app at a steady pace, ``N`` per POST, and collects their results
    (abstract)."""

    abstract = True
    app: ClassVar[str] = ""

    def on_start(self) -> None:
        # the SLO is known here: test_start (_read_slos) runs before any user is spawned
        self.per_post = _PLAN.per_post(SLOS.get(self.app, 1.0))
        self.interval_s = self.per_post / _PLAN.fps
        # each camera its own phase, then a fixed pace on an absolute clock (locust's
        # constant_pacing counts on_start's time as task time and so realigns the phases)
        self._k = random.randrange(N_FRAMES)
        self._next = time.time() + _phase() * self.interval_s
        gevent.sleep(max(0.0, self._next - time.time()))

    def wait_time(self) -> float:
        self._next += self.interval_s
        return max(0.0, self._next - time.time())

    @task
    def send_frames(self) -> None:
        """One POST of the camera's last ``per_post`` frames (split while the app's plan takes fewer)."""
        batch = [frames()[(self._k + index) % N_FRAMES] for index in range(self.per_post)]
        self._k += self.per_post
        sent = 0
        while sent < len(batch):
            size = min(MOST.get(self.app, len(batch)), len(batch) - sent)
            if self._post(batch[sent : sent + size]):
                sent += size

    def _post(self, batch: list[bytes]) -> bool:
        """POST ``batch`` and record one outcome per frame; False (nothing recorded) when the front
        refused it as larger than the plan can ever take and it must be sent split."""
        if len(batch) == 1:
            body: dict[str, Any] = {
                "data": batch[0],
                "headers": {"x-api-key": API_KEY, "content-type": "image/jpeg"},
            }
        else:
            frames_b64 = [{"image_b64": base64.b64encode(frame).decode()} for frame in batch]
            body = {"json": {"frames": frames_b64}, "headers": {"x-api-key": API_KEY}}
        sent_at = time.time()
        with self.client.post(
            f"/v1/apps/{self.app}/frames",
            name=f"POST /v1/apps/{self.app}/frames",
            catch_response=True,
            **body,
        ) as resp:
            post_ms = (time.time() - sent_at) * 1e3
            answer = _answer(resp)
            error = str(answer.get("error", ""))
            recs = [
                {
                    "app": self.app,
                    "sent_at": sent_at,
                    "status": resp.status_code,
                    "post_ms": post_ms,
                    "post_frames": len(batch),
                    "post_index": index,
                }
                for index in range(len(batch))
            ]
            if resp.status_code == 202:
                accepted = answer.get("accepted") or []
                for rec, frame_accepted in itertools.zip_longest(recs, accepted[: len(recs)]):
                    if frame_accepted is None:  # the front admits a POST whole; never expected
                        rec.update(result="lost", error="no request id")
                        continue
                    rec.update(request_id=frame_accepted["request_id"], result="pending")
                    if COLLECT == "during":
                        POLLERS.spawn(_collect, self.client, rec)
                resp.success()
            elif (
                len(batch) > 1
                and resp.status_code == 503
                and error == "batch_too_large"
                and answer.get("max_frames")
            ):
                most = int(answer["max_frames"])
                MOST[self.app] = max(1, min(MOST.get(self.app, len(batch)), most, len(batch) - 1))
                resp.failure(f"split 503 batch_too_large (max_frames {most})")
                return False
            elif resp.status_code in (429, 503):
                for rec in recs:
                    rec["error"] = error
                resp.failure(f"shed {resp.status_code} {error}")
            else:
                for rec in recs:
                    rec["error"] = error or (resp.text or "")[:80]
                resp.failure(f"{resp.status_code} {recs[0]['error']}")
        OUTCOMES.extend(recs)
        return True


def _phase() -> float:
    """A camera's phase in [0, 1): independent (``random``, the default) or ``even``: the k-th
    camera at frac(k x golden ratio), so any number of cameras is spread out evenly, as one
    steady stream split over them (``SKINFLINT_PHASES``)."""
    if PHASES == "even":
        return (next(_CAMERAS) * 0.6180339887498949) % 1.0
    return random.random()


def _answer(resp: Any) -> dict[str, Any]:
    """The JSON object of an answer ({} when it is none)."""
    try:
        body = resp.json()
    except (ValueError, AttributeError):
        return {}
    return body if isinstance(body, dict) else {}


def _error_code(resp: Any) -> str:
    return str(_answer(resp).get("error", ""))


def _collect(client: Any, rec: dict[str, Any]) -> None:
    """Read one frame's result once it should be finished; record its outcome and report its
    end-to-end latency. The latency is the server's (accept -> last result write), so reading late
    costs no accuracy, and reading cheaply matters: a long poll makes the front query DynamoDB every
    50 ms, and moto answers each query by scanning the whole results table. So: one read at the SLO
    (most frames are finished by then), then reads ``POLL_S`` apart, doubling, for the late ones."""
    slo = SLOS.get(rec["app"], 1.0)
    gevent.sleep(max(0.0, rec["sent_at"] + slo + 0.05 - time.time()))
    give_up = rec["sent_at"] + slo + _PLAN.drain_s + 30.0
    body: dict[str, Any] = {}
    pause = POLL_S
    while not _STATE["stopping"] and time.time() < give_up:
        with client.get(
            f"/v1/requests/{rec['request_id']}",
            headers={"x-api-key": API_KEY},
            name="GET /v1/requests/[id]",
            catch_response=True,
        ) as resp:
            if resp.status_code == 200:
                body = resp.json()
            else:
                resp.failure(f"{resp.status_code} {_error_code(resp)}")
        if body.get("status") in ("done", "dropped"):
            break
        gevent.sleep(min(pause, max(0.0, give_up - time.time())))
        pause *= 2
    _finish(rec, body, slo)


def _finish(rec: dict[str, Any], body: dict[str, Any], slo: float) -> None:
    status = body.get("status") or "pending"
    rec["result"] = status if status in ("done", "dropped") else "lost"
    rec["slo_s"] = slo
    for field in ("accepted_at", "deadline", "finished_at", "latency_s"):
        if body.get(field) is not None:
            rec[field] = body[field]
    reasons = sorted(
        {task.get("reason") for task in body.get("tasks", []) if task.get("status") == "dropped"} - {None}
    )
    if reasons:
        rec["drop_reasons"] = reasons
    latency_ms = (rec.get("latency_s") or 0.0) * 1e3
    failure = None if rec["result"] == "done" else RuntimeError(f"frame {rec['result']}")
    # locust ships py.typed but leaves EventHook.fire and EventHook.add_listener unannotated
    events.request.fire(  # type: ignore[no-untyped-call]
        request_type="FRAME",
        name=f"e2e {rec['app']}",
        response_time=latency_ms,
        response_length=0,
        exception=failure,
        context={},
    )


class TrafficUser(CameraUser):
    """Traffic camera: detector -> vehicle and person classifiers."""

    app = "traffic"


class FaceUser(CameraUser):
    """Face analysis: detector -> landmarks."""

    app = "face"


class PoseUser(CameraUser):
    """Pose estimation: detector -> pose network."""

    app = "pose"


class CaptionUser(CameraUser):
    """Captioning: encoder -> decoder."""

    app = "caption"


class ActdetUser(CameraUser):
    """Activity detection: detector -> tracker -> action classifier."""

    app = "actdet"


@events.test_start.add_listener  # type: ignore[untyped-decorator]  # unannotated in locust
def _read_slos(environment: Any, **_kw: Any) -> None:
    """The deployed apps' SLOs (GET /v1/apps); a missing app or key stops the test with a reason."""
    # requests (ssl) only after locust's gevent monkey-patching: imported before it, ssl recurses
    import requests

    try:
        response = requests.get(
            f"{(environment.host or '').rstrip('/')}/v1/apps", headers={"x-api-key": API_KEY}, timeout=30
        )
    except requests.RequestException as exc:
        log.error("cannot reach %s: %s", environment.host, exc)
        environment.process_exit_code = 2
        environment.runner.quit()
        return
    if response.status_code != 200:
        log.error("GET /v1/apps answered %s: %s", response.status_code, response.text[:200])
        environment.process_exit_code = 2
        environment.runner.quit()
        return
    SLOS.update({app["name"]: float(app["slo_s"]) for app in response.json().get("apps", [])})
    wanted = {user_class.app for user_class in environment.user_classes if getattr(user_class, "app", "")}
    missing = sorted(wanted - set(SLOS))
    if missing:
        log.error(
            "not deployed at %s: %s (deployed: %s)", environment.host, ", ".join(missing), ", ".join(SLOS)
        )
        environment.process_exit_code = 2
        environment.runner.quit()


def _collect_after(environment: Any) -> None:
    """``SKINFLINT_COLLECT=after``: read every accepted frame's result once the run and its drain
    are over, 8 at a time (a frame not finished yet is read again 1 and 2 s later). The run itself
    then carries no result reads: against moto, whose ``Query`` scans the whole results table,
    reads during the run slow the stack more the longer it runs (docs/loadtest.md)."""
    import requests  # after locust's monkey-patching, as in _read_slos

    session = requests.Session()
    pool = Pool(8)
    host = (environment.host or "").rstrip("/")

    def one(rec: dict[str, Any]) -> None:
        body: dict[str, Any] = {}
        for pause in (0.0, 1.0, 2.0):
            gevent.sleep(pause)
            try:
                response = session.get(
                    f"{host}/v1/requests/{rec['request_id']}", headers={"x-api-key": API_KEY}, timeout=30
                )
            except requests.RequestException:
                continue
            if response.status_code == 200:
                body = response.json()
                if body.get("status") in ("done", "dropped"):
                    break
        _finish(rec, body, SLOS.get(rec["app"], 1.0))

    for rec in [record for record in OUTCOMES if record.get("result") == "pending"]:
        pool.spawn(one, rec)
    pool.join(timeout=600)


@events.test_stop.add_listener  # type: ignore[untyped-decorator]  # unannotated in locust
def _write_outcomes(environment: Any, **_kw: Any) -> None:
    """Collect what is left (``after``: every result now), stop the collectors still polling
    (their frames count as lost) and write every outcome."""
    if COLLECT == "after":
        _collect_after(environment)
    _STATE["stopping"] = True
    POLLERS.join(timeout=6.0)
    POLLERS.kill(block=True, timeout=2.0)
    for rec in OUTCOMES:
        if rec.get("result") == "pending":
            rec["result"] = "lost"
    if OUT_PATH:
        with open(OUT_PATH, "w") as fh:
            for rec in OUTCOMES:
                fh.write(json.dumps(rec) + "\n")
