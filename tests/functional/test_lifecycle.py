"""Drain triggers against a fake IMDS over real HTTP (skinflint.local.fleet.LocalImds): IMDSv2
tokens, the Spot interruption notice, the termination lifecycle hook, and completing the hook."""

from __future__ import annotations

import threading
import time

import pytest

from skinflint.local.fleet import LocalImds
from workers.lifecycle import (
    SPOT_NOTICE_S,
    AutoScalingCompleter,
    DrainNotice,
    ImdsClient,
    LifecycleError,
    LifecycleWatcher,
)

pytestmark = pytest.mark.functional


@pytest.fixture
def imds():
    server = LocalImds().start()
    server.add("i-0abc")
    yield server
    server.stop()


def test_imdsv2_token_is_required_and_reused(imds):
    client = ImdsClient(imds.url("i-0abc"))
    assert client.instance_id() == "i-0abc"
    assert client.get("spot/instance-action") is None  # 404: no notice
    assert client.get("autoscaling/target-lifecycle-state") == "InService"
    token = client._token
    assert token is not None
    client.get("instance-id")
    assert client._token == token  # one token for many reads
    # a GET without the token header is refused (IMDSv2 only)
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{imds.url('i-0abc')}/latest/meta-data/instance-id", timeout=1)
    assert err.value.code == 401


def test_an_expired_token_is_fetched_again(imds):
    client = ImdsClient(imds.url("i-0abc"))
    client.get("instance-id")
    client._token = ("stale-token", float("inf"))  # IMDS no longer knows it: 401, then a new one
    assert client.get("instance-id") == "i-0abc"
    assert client._token[0] != "stale-token"


def test_unreachable_imds_is_a_lifecycle_error():
    client = ImdsClient("http://127.0.0.1:9", timeout_s=0.2)
    with pytest.raises(LifecycleError):
        client.get("instance-id")


def test_spot_notice_carries_the_two_minute_deadline(imds):
    watcher = LifecycleWatcher(ImdsClient(imds.url("i-0abc")), poll_s=0.05)
    assert watcher.check() is None
    at = time.time() + SPOT_NOTICE_S
    imds.interrupt_spot("i-0abc", at)
    notice = watcher.check()
    assert notice is not None and notice.reason == "spot"
    # the notice's time has whole seconds (ISO 8601): within 1 s of what was posted
    assert notice.deadline == pytest.approx(at, abs=1.0)
    assert notice.window_s == pytest.approx(SPOT_NOTICE_S, abs=1.5)


def test_spot_notice_wins_over_the_lifecycle_hook(imds):
    imds.set_target_state("i-0abc", "Terminated")
    imds.interrupt_spot("i-0abc", time.time() + 120)
    notice = LifecycleWatcher(ImdsClient(imds.url("i-0abc"))).check()
    assert notice is not None and notice.reason == "spot"


def test_watcher_reports_the_termination_hook_once(imds):
    got: list[DrainNotice] = []
    fired = threading.Event()

    def on_notice(n: DrainNotice) -> None:
        got.append(n)
        fired.set()

    watcher = LifecycleWatcher(ImdsClient(imds.url("i-0abc")), poll_s=0.05, hook_timeout_s=300)
    watcher.start(on_notice)
    time.sleep(0.2)
    assert not got
    t0 = time.time()
    imds.set_target_state("i-0abc", "Terminated")  # the ASG holds it in Terminating:Wait
    assert fired.wait(2.0)
    seen_after = time.time() - t0
    time.sleep(0.2)
    watcher.stop()
    assert [n.reason for n in got] == ["scale-in"]
    assert got[0].window_s == pytest.approx(300)
    assert seen_after < 0.5  # within a few polls


def test_watcher_keeps_polling_through_imds_errors():
    watcher = LifecycleWatcher(ImdsClient("http://127.0.0.1:9", timeout_s=0.05), poll_s=0.01)
    watcher.start(lambda n: None)
    time.sleep(0.3)
    watcher.stop()
    assert watcher.errors >= 2


class FakeAutoScaling:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    def complete_lifecycle_action(self, **kw) -> dict:
        self.calls.append(kw)
        return {}


def test_completer_continues_the_hook_for_this_instance():
    asg = FakeAutoScaling()
    AutoScalingCompleter(asg, "skinflint-workers-t4", "skinflint-drain").complete("i-0abc")
    assert asg.calls == [
        {
            "LifecycleHookName": "skinflint-drain",
            "AutoScalingGroupName": "skinflint-workers-t4",
            "InstanceId": "i-0abc",
            "LifecycleActionResult": "CONTINUE",
        }
    ]


def test_completer_wraps_aws_errors():
    from botocore.exceptions import ClientError

    class Refusing:
        def complete_lifecycle_action(self, **kw):
            raise ClientError({"Error": {"Code": "ValidationError", "Message": "no action"}}, "Complete")

    with pytest.raises(LifecycleError, match="no action"):
        AutoScalingCompleter(Refusing(), "g", "h").complete("i-1")
