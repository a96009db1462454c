"""Per-key limits before the app's admission, through the HTTP API (in process, fakes behind it):
one key's flood does not starve another key, nor count as demand beyond its quota; batches too
large for the plan are told how many frames fit."""

from __future__ import annotations

import base64
import hashlib

from core.adapters.rates import SHED_REASONS
from front.admission import AdmissionConfig
from tests.unit.front.fakes import Clock, client, jpeg, service
from tests.unit.front.test_admission import ORIGIN, deployment

URL = "/v1/apps/traffic/frames"


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def test_a_second_key_keeps_its_frames_during_a_one_key_flood_and_the_flood_counts_only_its_quota():
    # GIVEN an app planned for 4 frames/s (admitted 4.4), key-a limited to 1 frame/s (burst 2)
    clock = Clock(ORIGIN + 5.0)
    svc = service(
        deployment(frame_rate=4.0), AdmissionConfig(key_limits={_digest("key-a"): (1.0, 2.0)}), clock=clock
    )
    c = client(svc)
    body = jpeg()
    statuses: dict[str, list[int]] = {"key-a": [], "key-b": []}
    # WHEN key-a sends 50 frames/s for 10 s and key-b about 3 frames/s (every 17th)
    for k in range(50 * 10):
        clock.now = ORIGIN + 5.0 + k / 50
        keys = ["key-a", "key-b"] if k % 17 == 0 else ["key-a"]
        for key in keys:
            r = c.post(URL, content=body, headers={"x-api-key": key, "content-type": "image/jpeg"})
            statuses[key].append(r.status_code)
            if r.status_code == 429:
                assert r.json()["error"] == "rate_limited" and int(r.headers["retry-after"]) >= 1
    # THEN key-b keeps >= 95 % of its frames; key-a is 429 past its quota
    b = statuses["key-b"]
    assert len(b) == 30 and b.count(202) >= 0.95 * len(b)
    assert statuses["key-a"].count(429) >= 500 - 12
    # and the demand the control loop reads (FramesAccepted + capacity sheds, core/adapters/rates.py)
    # is key-b's frames plus at most key-a's quota: 30 + 1 x 10 s + 2
    m = svc.metrics
    demand = m.total("FramesAccepted", App="traffic") + sum(
        m.total("FrontRejected", App="traffic", Reason=reason) for reason in SHED_REASONS
    )
    assert demand <= 30 + 12


def test_a_batch_the_plan_can_never_take_is_503_with_how_many_fit_and_no_retry_after():
    # slo 0.6 s: at most 4 frames per request (test_admission.py)
    svc = service(
        deployment(slo_s=0.6), AdmissionConfig(burst_s=10.0), clock=Clock(ORIGIN + 10.24)
    )  # 0.01 s before a window ends
    frame = {"image_b64": base64.b64encode(jpeg()).decode(), "content_type": "image/jpeg"}
    r = client(svc).post(URL, json={"frames": [frame] * 5}, headers={"x-api-key": "key-a"})
    assert r.status_code == 503, r.text
    assert r.json()["error"] == "batch_too_large" and r.json()["max_frames"] == 4
    assert "retry-after" not in r.headers and "retry_after_s" not in r.json()
    ok = client(svc).post(URL, json={"frames": [frame] * 4}, headers={"x-api-key": "key-a"})
    assert ok.status_code == 202, ok.text


def test_a_batch_of_ten_is_admitted_on_an_idle_app_that_can_serve_it():
    # a plan whose windows within the SLO hold 10 frames: detector batch 8 at 32 req/s
    dep = deployment(frame_rate=4.0, det_batch=8, det_rate=32.0, slo_s=1.5)
    svc = service(dep, AdmissionConfig(), clock=Clock(ORIGIN + 10.0))
    frame = {"image_b64": base64.b64encode(jpeg()).decode(), "content_type": "image/jpeg"}
    r = client(svc).post(URL, json={"frames": [frame] * 10}, headers={"x-api-key": "key-a"})
    assert r.status_code == 202, r.text
    assert len(r.json()["accepted"]) == 10
