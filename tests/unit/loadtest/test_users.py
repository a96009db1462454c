"""The camera users' POSTs (loadtest/users.py): N frames per POST as the JSON batch form, one outcome
per frame, 429/503 shedding every frame of a POST, and a POST split on 503 ``batch_too_large``.

locust monkey-patches the process on import (gevent), so the users run in a subprocess with a fake
HTTP client; this process only reads what they recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.analysis import summarise_run
from skinflint.commands.demo import auto_frames_per_post as demo_rule

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import json, sys
from loadtest import users

class Answer:
    def __init__(self, status, body):
        self.status_code, self._body, self.text, self.outcome = status, body, json.dumps(body), None
    def json(self):
        return self._body
    def success(self):
        self.outcome = "success"
    def failure(self, message):
        self.outcome = message
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return False

class Client:
    def __init__(self):
        self.posts, self.answers, self.mode = [], [], "accept"
    def post(self, url, name, catch_response, data=None, json=None, headers=None):
        frames = [f["image_b64"] for f in json["frames"]] if json is not None else [data]
        self.posts.append({"frames": len(frames), "type": headers.get("content-type", "application/json")})
        n = len(frames)
        if self.mode == "shed":
            answer = Answer(503, {"error": "over_planned_rate"})
        elif self.mode == "rate":
            answer = Answer(429, {"error": "rate_limited"})
        elif n > 2 and self.mode == "small":
            answer = Answer(503, {"error": "batch_too_large", "max_frames": 2})
        else:
            post = f"{len(self.posts):030x}"
            answer = Answer(202, {"app": "traffic", "accepted": [
                {"request_id": f"{post}{i:02x}", "deadline": 0.0, "modules": ["detector"]} for i in range(n)
            ]})
        self.answers.append(answer)
        return answer

users.COLLECT = "after"  # no collector greenlets: this checks the POSTs and their records
users._FRAMES[:] = [bytes([i]) for i in range(users.N_FRAMES)]
users.SLOS["traffic"] = 0.4
out = {}
camera = users.TrafficUser.__new__(users.TrafficUser)
camera.client = Client()
camera.on_start()  # SKINFLINT_FPS_PER_USER=10: 10 x 0.4 / 2 = 2 frames every 0.2 s
out["auto"] = [camera.per_post, camera.interval_s]
camera.per_post = 5
for mode in ("accept", "shed", "rate", "small", "small"):
    camera.client.mode = mode
    camera.send_frames()
out["posts"] = camera.client.posts
out["failures"] = [a.outcome for a in camera.client.answers]
out["most"] = users.MOST
out["outcomes"] = users.OUTCOMES
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def run() -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SKINFLINT_FPS_PER_USER": "10",
        "SKINFLINT_RATE": "10",
        "SKINFLINT_FRAMES_PER_POST": "0",
    }
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_camera_posts_the_frames_of_half_the_slo_by_default(run):
    assert run["auto"] == [2, pytest.approx(0.2)]


def test_an_accepted_post_tracks_each_frame_by_its_request_id(run):
    assert run["posts"][0] == {"frames": 5, "type": "application/json"}
    first = run["outcomes"][:5]
    assert [rec["status"] for rec in first] == [202] * 5 and run["failures"][0] == "success"
    assert [rec["request_id"][-2:] for rec in first] == ["00", "01", "02", "03", "04"]
    assert len({rec["request_id"][:30] for rec in first}) == 1  # one POST
    assert [rec["post_index"] for rec in first] == [0, 1, 2, 3, 4]
    assert {rec["post_frames"] for rec in first} == {5} and {rec["result"] for rec in first} == {"pending"}


def test_a_shed_post_refuses_every_frame(run):
    shed = run["outcomes"][5:15]
    assert [(rec["status"], rec["error"]) for rec in shed] == [(503, "over_planned_rate")] * 5 + [
        (429, "rate_limited")
    ] * 5
    assert not any("request_id" in rec for rec in shed)
    assert run["failures"][1:3] == ["shed 503 over_planned_rate", "shed 429 rate_limited"]


def test_a_post_too_large_for_the_plan_is_split_and_so_are_the_later_ones(run):
    # the fourth POST of 5 is refused (max_frames 2) and sent again as 2 + 2 + 1 (the last as
    # image/jpeg); the fifth is split ahead, with no refusal
    assert [post["frames"] for post in run["posts"][3:]] == [5, 2, 2, 1, 2, 2, 1]
    assert run["posts"][6]["type"] == "image/jpeg"
    assert run["failures"][3] == "split 503 batch_too_large (max_frames 2)"
    assert run["most"] == {"traffic": 2}
    split = run["outcomes"][15:]
    assert len(split) == 10 and {rec["status"] for rec in split} == {202}  # no frame lost or doubled
    assert [rec["post_frames"] for rec in split] == [2, 2, 2, 2, 1] * 2
    assert len({rec["request_id"] for rec in split}) == 10


def test_the_summary_counts_frames_and_posts(run):
    total = summarise_run(run["outcomes"], [], duration_s=1.0)["total"]
    assert (total["offered"], total["accepted"], total["shed"]) == (25, 15, 10)
    assert total["posts"] == 1 + 2 + 3 + 3  # the refused POST of 5 is not counted: its frames went again
    assert total["frames_per_post"] == pytest.approx(25 / 9)


@pytest.mark.parametrize("rate", [0.5, 1.0, 4.0, 10.0, 25.0, 60.0])
@pytest.mark.parametrize("slo_s", [0.3, 0.4, 1.0, 2.0])
def test_the_default_is_the_demos_rule(rate, slo_s):
    from loadtest.rates import LoadPlan, auto_frames_per_post

    assert auto_frames_per_post(rate, slo_s) == demo_rule(rate, slo_s)
    plan = LoadPlan("steady", rate, 60.0)
    assert plan.per_post(slo_s) == demo_rule(plan.fps, slo_s)  # at the camera's rate, not the app's
    assert LoadPlan("steady", rate, 60.0, frames_per_post=7).per_post(slo_s) == 7
