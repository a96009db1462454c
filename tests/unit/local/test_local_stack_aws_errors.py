"""The local stack's own AWS calls (outside the adapters) at start-up: the hop probe and the look-up
of each app's dead-letter queue. A DLQ the first epoch did not create yet is left out; any other
failure of moto (an error answer, no answer) is a one-line :class:`StackError` naming moto, which
stops the stack; a ``ParamValidationError`` (a bug of ours) propagates. Fake clients, no moto."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import EndpointConnectionError, ParamValidationError, ReadTimeoutError

from core.adapters._aws import AWS_ERRORS
from skinflint.local.stack import OVERHEAD_PROBES, LocalStack, StackError
from tests.unit.core.test_aws_network_errors import ENDPOINT, FakeClient, service_error

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

MOTO = "http://127.0.0.1:5000"
QUEUE = f"{MOTO}/123456789012/skinflint-calibration"

#: moto failing: no answer (after the SDK's retries) or an error answer
FAILURES = [
    pytest.param(lambda: EndpointConnectionError(endpoint_url=ENDPOINT), ENDPOINT, id="unreachable"),
    pytest.param(lambda: ReadTimeoutError(endpoint_url=ENDPOINT), ENDPOINT, id="read-timeout"),
    pytest.param(lambda: service_error("InternalFailure", "X"), "InternalFailure", id="service-error"),
]


def not_planned(app: str, _hop_s: float) -> Any:
    raise AssertionError(f"{app} is not planned here")


def stack(tmp_path: Path, apps: list[str] | None = None) -> LocalStack:
    """A stack that was never started: its methods run on the clients they are given."""
    return LocalStack(apps or ["traffic"], not_planned, log_dir=str(tmp_path))


def one_line(err: BaseException) -> str:
    text = str(err)
    assert len(text.splitlines()) == 1, text
    return text


# -- the dead-letter queues ------------------------------------------------------------------------


def dlq_answers(missing: dict[str, Exception]) -> dict[str, Any]:
    """GetQueueUrl of ``skinflint-<app>-dlq``; the apps in ``missing`` raise their error."""

    def get_queue_url(QueueName: str) -> dict[str, str]:  # noqa: N803 - boto3's keyword
        app = QueueName.removeprefix("skinflint-").removesuffix("-dlq")
        if app in missing:
            raise missing[app]
        return {"QueueUrl": f"{MOTO}/123456789012/{QueueName}"}

    return {"get_queue_url": get_queue_url}


def test_every_apps_dlq_is_found(tmp_path: Path) -> None:
    sqs = FakeClient(AssertionError("unexpected call"), dlq_answers({}))
    assert stack(tmp_path, ["traffic", "cams"])._dlqs(sqs, MOTO) == {
        "traffic": f"{MOTO}/123456789012/skinflint-traffic-dlq",
        "cams": f"{MOTO}/123456789012/skinflint-cams-dlq",
    }


@pytest.mark.parametrize("code", ["AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"])
def test_a_dlq_not_created_yet_is_left_out(tmp_path: Path, code: str) -> None:
    # the query protocol's code (moto's) and the JSON protocol's: the app's first queues are not made yet
    sqs = FakeClient(
        AssertionError("unexpected call"), dlq_answers({"cams": service_error(code, "GetQueueUrl")})
    )
    assert stack(tmp_path, ["traffic", "cams"])._dlqs(sqs, MOTO) == {
        "traffic": f"{MOTO}/123456789012/skinflint-traffic-dlq"
    }


@pytest.mark.parametrize(("make_error", "shown"), FAILURES)
def test_moto_failing_on_the_dlq_lookup_is_a_stack_error(
    tmp_path: Path, make_error: Callable[[], Exception], shown: str
) -> None:
    error = make_error()
    sqs = FakeClient(AssertionError("unexpected call"), dlq_answers({"cams": error}))
    with pytest.raises(StackError) as raised:
        stack(tmp_path, ["traffic", "cams"])._dlqs(sqs, MOTO)
    text = one_line(raised.value)
    assert text.startswith(f"GetQueueUrl skinflint-cams-dlq against moto ({MOTO}) failed: ") and shown in text
    assert raised.value.__cause__ is error


def test_a_bad_dlq_request_of_ours_propagates(tmp_path: Path) -> None:
    bug = ParamValidationError(report="Invalid type for parameter QueueName")
    with pytest.raises(ParamValidationError):
        stack(tmp_path)._dlqs(FakeClient(bug), MOTO)


# -- the hop probe -----------------------------------------------------------------------------------

#: every call of the probe and its answer (moto's, shortened)
PROBE_ANSWERS: dict[str, Any] = {
    "create_queue": {"QueueUrl": QUEUE},
    "send_message_batch": {"Successful": [{"Id": "0"}]},
    "receive_message": {"Messages": [{"ReceiptHandle": "rh-0", "Body": "x"}]},
    "delete_message": {},
    "delete_queue": {},
    "put_item": {},
}


def probe_clients(error: Exception, failing: str) -> dict[str, FakeClient]:
    """SQS and DynamoDB answering every call of the probe but ``failing``, which raises ``error``."""
    answers = {op: a for op, a in PROBE_ANSWERS.items() if op != failing}
    return {"sqs": FakeClient(error, answers), "dynamodb": FakeClient(error, answers)}


def test_the_probe_makes_every_hops_requests_and_cleans_up(tmp_path: Path) -> None:
    clients = probe_clients(AssertionError("unexpected call"), failing="")
    overhead = stack(tmp_path)._hop_overhead(clients, MOTO)
    assert 0.0 <= overhead < 1.0  # fake calls: no server time
    hop = ["send_message_batch", "receive_message", "delete_message"]
    assert clients["sqs"].calls == ["create_queue", *hop * OVERHEAD_PROBES, "delete_queue"]
    assert clients["dynamodb"].calls == ["put_item"] * OVERHEAD_PROBES


@pytest.mark.parametrize("failing", sorted(PROBE_ANSWERS))
@pytest.mark.parametrize(("make_error", "shown"), FAILURES)
def test_moto_failing_during_the_probe_is_a_stack_error(
    tmp_path: Path, failing: str, make_error: Callable[[], Exception], shown: str
) -> None:
    error = make_error()
    with pytest.raises(StackError) as raised:
        stack(tmp_path)._hop_overhead(probe_clients(error, failing), MOTO)
    text = one_line(raised.value)
    assert text.startswith(f"the hop probe against moto ({MOTO}) failed: ") and shown in text
    assert raised.value.__cause__ is error and not isinstance(raised.value, AWS_ERRORS)


@pytest.mark.parametrize("failing", ["create_queue", "put_item"])
def test_a_bad_probe_request_of_ours_propagates(tmp_path: Path, failing: str) -> None:
    bug = ParamValidationError(report="Missing required parameter")
    with pytest.raises(ParamValidationError):
        stack(tmp_path)._hop_overhead(probe_clients(bug, failing), MOTO)


def test_the_stack_gives_draining_agents_an_idle_workers_last_poll() -> None:
    """An agent's drain waits for its workers' receives in flight (a worker idle for
    ``idle_after_s`` is in an ``idle_wait_s`` poll): the stack's stop must not kill it before."""
    import dataclasses

    from skinflint.local.stack import FLEET_STOP_S
    from workers.worker import Worker

    defaults = {f.name: f.default for f in dataclasses.fields(Worker)}
    assert FLEET_STOP_S > defaults["idle_wait_s"] + 3
