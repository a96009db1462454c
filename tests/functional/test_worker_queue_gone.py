"""A worker whose queue is deleted under it (the garbage collector removed a superseded version's
queue) logs it once, runs what it already holds and stops: no retry loop, no crash, no restart by
the instance agent."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from botocore.exceptions import ClientError

from core.adapters.queues import queue_gone
from core.errors import QueueError
from tests.functional.test_worker import make_worker, run_car_workers, send_frames

pytestmark = pytest.mark.functional


def gone_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "no longer exists" in r.getMessage()]


def test_queue_gone_recognises_both_sqs_codes() -> None:
    for code in ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"):
        cause = ClientError({"Error": {"Code": code, "Message": "gone"}}, "ReceiveMessage")
        err = QueueError("cannot receive", queue_url="q")
        err.__cause__ = cause
        assert queue_gone(err) and queue_gone(cause)
    other = QueueError("throttled", queue_url="q")
    other.__cause__ = ClientError({"Error": {"Code": "ThrottlingException"}}, "ReceiveMessage")
    assert not queue_gone(other)
    assert not queue_gone(QueueError("no cause"))


def test_deleting_a_queue_that_is_already_gone_says_so(stack) -> None:
    from control.queues import delete_queue

    url = stack.sqs.create_queue(QueueName="skinflint-gone-twice")["QueueUrl"]
    assert delete_queue(stack.sqs, url) is True
    assert delete_queue(stack.sqs, url) is False  # moto: the legacy code

    class Sqs:  # botocore without the query-compatible code: the JSON protocol's exception name
        def __init__(self, code: str) -> None:
            self.code = code

        def delete_queue(self, QueueUrl: str) -> None:  # noqa: N803 - boto3's keyword
            raise ClientError({"Error": {"Code": self.code, "Message": "x"}}, "DeleteQueue")

    assert delete_queue(Sqs("QueueDoesNotExist"), url) is False
    with pytest.raises(QueueError, match="cannot delete"):
        delete_queue(Sqs("AccessDenied"), url)


def test_a_serving_worker_stops_once_when_its_queue_is_deleted(stack, caplog) -> None:
    caplog.set_level(logging.INFO, logger="skinflint.worker")
    w = make_worker(stack, "detector")
    t = threading.Thread(target=w.serve, daemon=True)
    t.start()
    time.sleep(0.3)
    # WHEN the queue is deleted while the worker long-polls it
    stack.sqs.delete_queue(QueueUrl=w.assignment.queue_url)
    t.join(6)
    # THEN the worker stopped by itself (no spin on the missing queue), saying so once
    assert not t.is_alive()
    assert w.queue_gone
    assert len(gone_warnings(caplog)) == 1
    assert not [r for r in caplog.records if r.getMessage().startswith("receive failed")]
    assert w.totals["released"] == 0


def test_requests_held_when_the_queue_vanishes_are_still_answered(stack, caplog) -> None:
    caplog.set_level(logging.INFO, logger="skinflint.worker")
    w = make_worker(stack, "detector")
    ids = send_frames(stack, 2, at=time.time())
    w.poll_once(wait_s=0)
    assert len(w.assembler) == 2
    # WHEN the queue is deleted with two requests received and buffered
    stack.sqs.delete_queue(QueueUrl=w.assignment.queue_url)
    outcomes = w.run_ready(now=time.time() + 5.0)  # their window has closed
    # THEN the batch ran (children forwarded, carrying its results), deleting its messages found the
    # queue gone, which is not a failed batch (nothing is retried, nothing left for redelivery)
    assert [o.ran for o in outcomes] == [2] and outcomes[0].forwarded >= 2
    assert w.queue_gone
    (warning,) = gone_warnings(caplog)
    assert "delete failed" in warning
    # and the frames are answered: the cars record the detector's results with theirs
    run_car_workers(stack)
    for rid in ids:
        req = stack.results.get_request(rid)
        assert req is not None and req.status != "queued", req
        assert [(t.module, t.status) for t in req.tasks if t.module == "detector"] == [("detector", "done")]
    # and serving it now returns at once: nothing held, nothing to receive from
    t = threading.Thread(target=w.serve, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive()
    assert len(gone_warnings(caplog)) == 1
    assert not [r for r in caplog.records if "left for redelivery" in r.getMessage()]
