"""A push app's results (docs/dataplane.md, "Results: pull or push"): its workers send each batch's
records to the app's results queue and write nothing to the results table; ``GET /v1/requests/{id}``
answers 409 ``results_pushed``; ``skinflint results`` decodes, prints and deletes them; the sweep
lists the frames past their deadline in a due message, and the consumer reports the unfinished ones
dropped, ``stranded``."""

from __future__ import annotations

import json
import time

import pytest

from control.sweeper import SweepConfig, sweep
from core.adapters.metrics import MemoryMetrics
from core.adapters.results import (
    DUE_BUCKET_S,
    STRANDED,
    PushedFrames,
    decode_pushed,
    due_bucket,
)
from core.errors import ResultStoreError
from core.ids import post_of
from front.errors import RequestRejectedError
from skinflint.commands.results import consume, line
from tests.functional.test_worker import front, make_worker, run_car_workers, send_frames

pytestmark = pytest.mark.functional


def _drain_detector(stack, n: int) -> None:
    det = make_worker(stack, "detector")
    end = time.time() + 5
    while det.totals["ran"] + det.totals["dropped"] < n and time.time() < end:
        det.poll_once(wait_s=0)
        det.run_ready(now=float("inf"))


def _table_items(stack) -> list[dict]:
    return stack.ddb.scan(TableName=stack.cfg.results_table)["Items"]


def _queue_bodies(stack, url: str) -> list[str]:
    out: list[str] = []
    while True:
        got = stack.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
        msgs = got.get("Messages", [])
        if not msgs:
            return out
        out += [m["Body"] for m in msgs]
        stack.sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)],
        )


def test_a_push_apps_records_go_to_its_results_queue_not_to_the_table(push_stack):
    stack = push_stack
    url = stack.deployment.results_queue
    assert stack.deployment.results == "push" and url.endswith("/skinflint-traffic-results")
    attrs = stack.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (
        attrs["SqsManagedSseEnabled"] == "true"
        and int(json.loads(attrs["RedrivePolicy"])["maxReceiveCount"]) == 5
    )
    assert attrs["MessageRetentionPeriod"] == str(7 * 86_400)
    # GIVEN two frames through the detector and the cars
    ids = send_frames(stack, 2)
    before = _table_items(stack)  # the POST item, in its due minute's partition (the front's)
    assert [
        (item["pk"]["S"][:4], item["sk"]["S"]) for item in before if not item["pk"]["S"].startswith("slot#")
    ] == [("due#", post_of(ids[0]))]
    _drain_detector(stack, 2)
    cars = run_car_workers(stack)
    ran = sum(w.totals["ran"] for w in cars)
    # THEN nothing was written to the table by the workers, and the queue holds their records
    assert _table_items(stack) == before
    bodies = _queue_bodies(stack, url)
    messages = [decode_pushed(body) for body in bodies]
    assert all(m.kind == "records" and m.app == "traffic" for m in messages)
    terminal = [t for m in messages for t in m.tasks if t.weight is not None]
    assert len(terminal) == ran and {t.request_id for t in terminal} == set(ids)
    # AND a consumer assembles both frames, done, with the detector carried in the cars' lineage
    frames = PushedFrames()
    finished = [res for m in messages for res in frames.add(m)]
    assert sorted(r.request_id for r in finished) == sorted(ids) and frames.pending() == []
    for res in finished:
        assert res.status == "done" and res.latency_s is not None and res.latency_s > 0
        assert {t.module for t in res.tasks} == {"detector", "car"}
    # AND the outcomes were counted once per frame, as for a pull app
    assert stack.metrics.weights("FramesFinished", App="traffic") == pytest.approx(2.0)


def test_get_answers_409_naming_the_results_queue(push_stack):
    (rid,) = send_frames(push_stack, 1)
    with pytest.raises(RequestRejectedError) as err:
        front(push_stack).result(rid)
    assert err.value.status == 409 and err.value.error == "results_pushed"
    assert "skinflint-traffic-results" in err.value.reason and "skinflint results traffic" in err.value.reason
    # and the apps listing says where its results go
    (listed,) = front(push_stack).list_apps()
    assert (listed["results"], listed["results_queue"]) == ("push", "skinflint-traffic-results")


def test_the_cli_consumer_decodes_prints_and_deletes(push_stack):
    from core.adapters.queues import TaskQueues

    stack = push_stack
    ids = send_frames(stack, 3)
    _drain_detector(stack, 3)
    run_car_workers(stack)
    url = stack.deployment.results_queue
    stack.sqs.send_message(QueueUrl=url, MessageBody="not a results message")  # a poison message
    lines: list[str] = []
    warnings: list[str] = []
    count = consume(TaskQueues(stack.sqs), url, False, lambda res: lines.append(line(res)), warnings.append)
    assert count == 3 and sorted(text.split()[0] for text in lines) == sorted(ids)
    assert all(text.split()[1] == "done" and " s  " in text for text in lines)
    assert "detector/car.0" in " ".join(lines)
    assert len(warnings) == 1 and "not a results message" in warnings[0]
    # the decoded messages were deleted; the poison one is left for the DLQ
    attrs = stack.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attrs["ApproximateNumberOfMessages"], attrs["ApproximateNumberOfMessagesNotVisible"]) == (
        "0",
        "1",
    )


def test_the_cli_command_reads_the_apps_queue(push_stack, monkeypatch, capsys):
    from skinflint.cli import main
    from skinflint.commands import results as command

    stack = push_stack
    (rid,) = send_frames(stack, 1)
    _drain_detector(stack, 1)
    run_car_workers(stack)
    monkeypatch.setattr(command, "data_config", lambda endpoint: stack.cfg)
    assert main(["results", "traffic", "--json"]) == 0
    (out,) = capsys.readouterr().out.splitlines()
    doc = json.loads(out)
    assert doc["request_id"] == rid and doc["status"] == "done" and doc["app"] == "traffic"


def test_the_cli_refuses_a_pull_app_in_one_line(stack, monkeypatch, capsys):
    from skinflint.cli import main
    from skinflint.commands import results as command

    monkeypatch.setattr(command, "data_config", lambda endpoint: stack.cfg)
    assert main(["results", "traffic"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "results: pull" in err
    assert main(["results", "nope"]) == 1
    assert "no app named 'nope'" in capsys.readouterr().err


def test_the_sweep_lists_a_push_apps_due_frames_and_the_consumer_reports_the_lost_one(push_stack):
    stack = push_stack
    # GIVEN three frames of which only the first two ran (the third's detector message is lost: it
    # comes in a POST of its own, since a POST's frames share one message)
    ids = send_frames(stack, 2) + send_frames(stack, 1)
    det_url = stack.deployment.queues["detector"]["0/0"]
    msgs = stack.sqs.receive_message(QueueUrl=det_url, MaxNumberOfMessages=10, VisibilityTimeout=0)[
        "Messages"
    ]
    lost = next(m for m in msgs if ids[2] in m["Body"])
    stack.sqs.delete_message(QueueUrl=det_url, ReceiptHandle=lost["ReceiptHandle"])
    _drain_detector(stack, 2)
    run_car_workers(stack)
    before = _table_items(stack)
    # WHEN the sweep runs past the deadlines' grace
    deadlines = {
        rid: frame[1]
        for i in before
        if i["pk"]["S"].startswith("due#")
        for rid, frame in ((i["sk"]["S"] + idx, f) for idx, f in json.loads(i["frames"]["S"]).items())
    }
    deadline = max(deadlines.values())
    cfg = SweepConfig(grace_s=120.0)
    later = (due_bucket(deadline) + 1) * DUE_BUCKET_S + cfg.grace_s + 1
    metrics = MemoryMetrics()
    from core.adapters.queues import TaskQueues

    report = sweep(
        stack.results, metrics, None, later, cfg, push={"traffic": stack.deployment.results_queue},
        queues=TaskQueues(stack.sqs),
    )  # fmt: skip
    # THEN it wrote nothing, counted the three frames as pushed (none unaccounted) ...
    assert _table_items(stack) == before
    assert (report.accepted, report.pushed, report.answered, report.stranded) == (3, 3, 0, 0)
    assert report.unaccounted == [] and metrics.total("FramesUnaccounted") == 0
    # ... and the consumer reports the two answered frames done and the lost one dropped, stranded
    bodies = _queue_bodies(stack, stack.deployment.results_queue)
    frames = PushedFrames()
    # the due message first (SQS does not order them): a frame it lists is settled on it, the
    # records after it finish the two others
    ordered = sorted((decode_pushed(b) for b in bodies), key=lambda m: m.kind != "records")
    seen = {res.request_id: res for m in ordered for res in frames.add(m)}
    assert set(seen) == set(ids)
    assert [seen[rid].status for rid in ids] == ["done", "done", "dropped"]
    assert [(t.task_id, t.reason) for t in seen[ids[2]].tasks] == [(STRANDED, STRANDED)]
    assert seen[ids[2]].deadline == pytest.approx(deadlines[ids[2]])
    # a second sweep of the same minutes sends the due message again: the consumer reports nothing twice
    sweep(stack.results, MemoryMetrics(), None, later, cfg, push={"traffic": stack.deployment.results_queue},
          queues=TaskQueues(stack.sqs))  # fmt: skip
    (again,) = [decode_pushed(b) for b in _queue_bodies(stack, stack.deployment.results_queue)]
    assert again.kind == "due" and frames.add(again) == []


def test_decode_refuses_anything_but_a_results_message_in_one_line():
    for body in ("", "{}", '{"v": 2, "kind": "records"}', '{"v": 1, "kind": "records", "app": "a"}', "[1]"):
        with pytest.raises(ResultStoreError) as err:
            decode_pushed(body)
        assert "\n" not in str(err.value) and str(err.value).startswith("not a results message")


def test_the_http_get_answers_409_as_its_openapi_says(push_stack):
    from fastapi.testclient import TestClient

    from front.app import create_app
    from tests.functional.conftest import API_KEY

    svc = front(push_stack)
    client = TestClient(create_app(lambda: svc))
    auth = {"x-api-key": API_KEY}
    (rid,) = send_frames(push_stack, 1)
    r = client.get(f"/v1/requests/{rid}", headers=auth)
    assert r.status_code == 409 and r.json()["error"] == "results_pushed"
    assert "skinflint-traffic-results" in r.json()["reason"]
    spec = client.get("/openapi.json", headers=auth).json()
    assert "409" in spec["paths"]["/v1/requests/{request_id}"]["get"]["responses"]
