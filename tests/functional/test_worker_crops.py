"""Children carry their crop of the parent's frame, not the whole frame (workers/crops.py, issue #25):
smaller messages that decode to the region's pixels, byte-identical on a redelivery, inline also
for a frame the front spilled to S3; a payload the worker does not decode travels whole with the
child's region, as before."""

from __future__ import annotations

import base64
import dataclasses
import io
import time
from typing import TYPE_CHECKING

import numpy as np
import pytest
from PIL import Image

from core.routing import child_region
from core.schema import TaskMessage
from core.wire import decode
from tests.functional.conftest import jpeg_bytes
from tests.functional.test_worker import deliver, front, make_worker, run_car_workers
from workers.crops import open_frame, region_box

if TYPE_CHECKING:
    from front.service import FrontService

pytestmark = pytest.mark.functional


def _car_messages(stack) -> list[TaskMessage]:
    out = []
    for url in stack.deployment.queues["car"].values():
        out += [task for m in stack.messages(url) for task in decode(m["Body"])]
    return sorted(out, key=lambda m: m.task_id)


def _bodies(stack) -> dict[str, str]:
    out = {}
    for url in stack.deployment.queues["car"].values():
        # a parent batch's children travel in one message (core/wire.py): each task's own JSON
        out.update(
            {task.task_id: task.model_dump_json() for m in stack.messages(url) for task in decode(m["Body"])}
        )
    return out


def _pixels(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img.convert("RGB"), dtype=np.int16)


def _send(stack, frame: bytes, content_type: str = "image/jpeg", svc: FrontService | None = None) -> str:
    svc = svc or front(stack)
    (accepted,) = svc.accept("traffic", [(frame, content_type)]).accepted
    return accepted.request_id


def _smooth_jpeg(width: int, height: int, quality: int = 85) -> bytes:
    """A camera-like frame (gradients, not noise): JPEG compresses it as it would a video frame."""
    y, x = np.mgrid[0:height, 0:width]
    arr = np.stack([x * 255 // width, y * 255 // height, (x + y) * 255 // (width + height)], axis=2)
    buf = io.BytesIO()
    Image.fromarray(arr.astype(np.uint8)).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def test_a_child_carries_its_crop_which_decodes_to_its_regions_pixels(stack):
    # GIVEN a 320x240 JPEG frame at the detector
    frame = _smooth_jpeg(320, 240)
    _send(stack, frame)
    url = stack.deployment.queues["detector"]["0/0"]
    (raw,) = stack.messages(url)
    parent = TaskMessage.parse(raw["Body"])
    # WHEN the detector runs it
    (out,) = deliver(make_worker(stack, "detector"), raw, 1)
    # THEN each car carries a JPEG of its box at the frame's resolution, no region, much smaller
    children = _car_messages(stack)
    assert len(children) == out.forwarded >= 1
    whole = _pixels(frame)
    for child in children:
        assert (
            child.region is None and child.payload.inline_b64 and child.payload.content_type == "image/jpeg"
        )
        data = base64.b64decode(child.payload.inline_b64)
        assert child.payload.size == len(data) < len(frame) / 2
        _, name = child.task_id.split("/")
        module, index = name.split(".")
        left, top, right, bottom = region_box(
            child_region(parent.idempotency_key, module, int(index)), 320, 240
        )
        crop = _pixels(data)
        assert crop.shape == (bottom - top, right - left, 3) == (96, 128, 3)  # 0.4 x 240, 0.4 x 320
        # re-encoded with the source's tables: within JPEG noise of the frame's own pixels there
        assert np.abs(crop - whole[top:bottom, left:right]).mean() < 3.0


def test_a_png_frame_gives_png_crops_with_exactly_the_regions_pixels(stack):
    buf = io.BytesIO()
    rng = np.random.default_rng(3)
    Image.fromarray(rng.integers(0, 255, (60, 80, 3), dtype=np.uint8)).save(buf, format="PNG")
    frame = buf.getvalue()
    _send(stack, frame, "image/png")
    (raw,) = stack.messages(stack.deployment.queues["detector"]["0/0"])
    key = TaskMessage.parse(raw["Body"]).idempotency_key
    deliver(make_worker(stack, "detector"), raw, 1)
    for child in _car_messages(stack):
        assert child.payload.content_type == "image/png" and child.region is None
        index = int(child.task_id.rsplit(".", 1)[1])
        left, top, right, bottom = region_box(child_region(key, "car", index), 80, 60)
        assert np.array_equal(
            _pixels(base64.b64decode(child.payload.inline_b64)), _pixels(frame)[top:bottom, left:right]
        )


def test_a_redelivered_parent_forwards_byte_identical_children(stack):
    _send(stack, jpeg_bytes(320, 240, seed=5))
    (raw,) = stack.messages(stack.deployment.queues["detector"]["0/0"])
    deliver(make_worker(stack, "detector"), raw, 1)
    first = _bodies(stack)
    for url in stack.deployment.queues["car"].values():  # empty the car queues
        stack.sqs.purge_queue(QueueUrl=url)
    # WHEN a fresh worker gets the same parent again (its delete was lost)
    deliver(make_worker(stack, "detector"), raw, 2)
    second = _bodies(stack)
    # THEN the children carry the same crops (bytes), weights and ids; only the copy mark differs
    assert first.keys() == second.keys() and first
    for task_id, body in first.items():
        a, b = TaskMessage.parse(body), TaskMessage.parse(second[task_id])
        assert a.payload == b.payload and a.weight == b.weight and a.region is b.region is None
        assert (a.recheck, b.recheck) == (False, True)


def test_a_frame_in_s3_sends_its_crops_inline_and_a_crop_over_the_limit_goes_to_s3(stack):
    # GIVEN a frame over the front's inline limit (it is stored in S3)
    frame = jpeg_bytes(320, 240, seed=9)  # noise: ~25 KB
    svc = front(stack)
    svc.config = dataclasses.replace(svc.config, inline_limit_bytes=4096)
    rid = _send(stack, frame, svc=svc)
    (raw,) = stack.messages(stack.deployment.queues["detector"]["0/0"])
    assert TaskMessage.parse(raw["Body"]).payload.s3_key == f"frames/{rid}"
    # WHEN the detector (inline limit 200 KiB) runs it, THEN its crops travel inline
    deliver(make_worker(stack, "detector"), raw, 1)
    inline = _car_messages(stack)
    assert inline and all(c.payload.inline_b64 and c.payload.s3_key is None for c in inline)
    for url in stack.deployment.queues["car"].values():
        stack.sqs.purge_queue(QueueUrl=url)
    # WHEN a detector whose inline limit is below a crop's base64 runs it again
    deliver(make_worker(stack, "detector", payload_inline_limit_bytes=1024), raw, 2)
    spilled = _car_messages(stack)
    # THEN each crop is in S3 under the frames' prefix, with the same bytes as inline
    assert [c.task_id for c in spilled] == [c.task_id for c in inline]
    for a, b in zip(inline, spilled, strict=True):
        assert (
            b.payload.s3_key == f"frames/{rid}/{b.task_id.replace('/', '_')}" and b.payload.inline_b64 is None
        )
        assert stack.blobs.get(b.payload.s3_key) == base64.b64decode(a.payload.inline_b64)
    # and the cars read them: the frame is done
    run_car_workers(stack)
    assert front(stack).result(rid).status == "done"


def test_a_payload_that_is_not_an_image_travels_whole_with_the_region(stack):
    # GIVEN a detector message whose payload is not a JPEG/PNG (a synthetic payload)
    _send(stack, jpeg_bytes(seed=1))
    url = stack.deployment.queues["detector"]["0/0"]
    (raw,) = stack.messages(url)
    msg = TaskMessage.parse(raw["Body"])
    fake = msg.payload.model_copy(
        update={"inline_b64": base64.b64encode(b"not an image").decode(), "size": 12}
    )
    raw = {**raw, "Body": msg.model_copy(update={"payload": fake}).model_dump_json()}
    # WHEN an emulated detector runs it, THEN its children carry the payload and their region
    (out,) = deliver(make_worker(stack, "detector"), raw, 1)
    children = _car_messages(stack)
    assert len(children) == out.forwarded >= 1
    for child in children:
        index = int(child.task_id.rsplit(".", 1)[1])
        assert child.payload == fake and child.region == child_region(msg.idempotency_key, "car", index)


def test_a_frame_over_the_pixel_cap_is_not_decoded_for_crops(stack, monkeypatch):
    monkeypatch.setenv("SKINFLINT_WORKER_MAX_PIXELS", "1000")
    _send(stack, jpeg_bytes(64, 48, seed=2))  # 3,072 pixels
    (raw,) = stack.messages(stack.deployment.queues["detector"]["0/0"])
    with pytest.raises(ValueError, match="over the worker's cap"):
        open_frame(base64.b64decode(TaskMessage.parse(raw["Body"]).payload.inline_b64))
    deliver(make_worker(stack, "detector"), raw, 1)
    assert all(c.region is not None and c.payload.size > 1000 for c in _car_messages(stack))


def test_cars_finish_a_frame_from_their_crops(stack):
    ids = [_send(stack, jpeg_bytes(160, 120, seed=s)) for s in range(2)]
    det = make_worker(stack, "detector")
    deadline = time.time() + 5
    while time.time() < deadline and det.totals["ran"] < 2:
        det.poll_once(wait_s=0)
        det.run_ready(now=float("inf"))
    run_car_workers(stack)
    assert [front(stack).result(rid).status for rid in ids] == ["done", "done"]


def test_a_real_model_and_the_crops_share_one_decode(stack, monkeypatch):
    # GIVEN a runtime that decodes frames (as OnnxRuntime: prepare_frame takes the worker's decode)
    import workers.worker as worker_module
    from workers.runtimes import EmulatedRuntime

    decodes: list[int] = []
    real_open = worker_module.open_frame
    monkeypatch.setattr(
        worker_module, "open_frame", lambda data: decodes.append(len(data)) or real_open(data)
    )

    class Decoding(EmulatedRuntime):
        emulated = False
        frames: list[tuple[int, int]] = []

        def prepare(self, data, region):
            raise AssertionError("the frame was decoded by the worker: prepare_frame takes it")

        def prepare_frame(self, rgb, region):
            self.frames.append(rgb.size)
            return rgb.size

    _send(stack, jpeg_bytes(320, 240, seed=4))
    (raw,) = stack.messages(stack.deployment.queues["detector"]["0/0"])
    rt = Decoding(0.0, "t4", sleep=lambda s: None)
    (out,) = deliver(make_worker(stack, "detector", runtime=rt), raw, 1)
    # THEN the frame was decoded once, the model got it at its own resolution, and the crops went out
    assert len(decodes) == 1 and rt.frames == [(320, 240)] and out.forwarded >= 1
    assert all(c.region is None for c in _car_messages(stack))
