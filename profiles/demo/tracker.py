"""SORT-style multi-object tracker on the CPU (numpy): constant-velocity Kalman filter per track and
greedy IoU association. The ``actdet`` application runs it between the detector and the action
classifier; it keeps state across frames, so it is a CPU module, not a DNN.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

__all__ = ["IouTracker", "Track", "iou_matrix", "synthetic_detections", "time_tracker"]


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in ``a`` (N, 4) with every box in ``b`` (M, 4), boxes as x1, y1, x2, y2."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    iou: np.ndarray = inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-9)
    return iou


_F = np.eye(8)
_F[:4, 4:] = np.eye(4)  # state: cx, cy, w, h and their velocities
_H = np.eye(4, 8)
_Q = np.diag([1.0, 1.0, 1.0, 1.0, 0.1, 0.1, 0.1, 0.1])
_R = np.eye(4) * 4.0


def _to_z(box: np.ndarray) -> np.ndarray:
    return np.array([(box[0] + box[2]) / 2, (box[1] + box[3]) / 2, box[2] - box[0], box[3] - box[1]])


def _to_box(x: np.ndarray) -> np.ndarray:
    cx, cy, w, h = x[:4]
    return np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])


@dataclass
class Track:
    track_id: int
    x: np.ndarray
    p: np.ndarray = field(default_factory=lambda: np.eye(8) * 10.0)
    hits: int = 1
    misses: int = 0

    def predict(self) -> None:
        self.x = _F @ self.x
        self.p = _F @ self.p @ _F.T + _Q

    def update(self, box: np.ndarray) -> None:
        y = _to_z(box) - _H @ self.x
        s = _H @ self.p @ _H.T + _R
        k = self.p @ _H.T @ np.linalg.inv(s)
        self.x = self.x + k @ y
        self.p = (np.eye(8) - k @ _H) @ self.p
        self.hits += 1
        self.misses = 0

    @property
    def box(self) -> np.ndarray:
        return _to_box(self.x)


class IouTracker:
    """Associates each frame's detections with tracks; returns ``[(track_id, box), ...]`` per frame."""

    def __init__(self, iou_threshold: float = 0.3, max_misses: int = 5):
        self.iou_threshold = iou_threshold
        self.max_misses = max_misses
        self.tracks: list[Track] = []
        self._next_id = 0

    def update(self, detections: np.ndarray) -> list[tuple[int, np.ndarray]]:
        for track in self.tracks:
            track.predict()
        boxes = np.array([track.box for track in self.tracks]).reshape(-1, 4)
        ious = iou_matrix(boxes, detections)
        matched_t: set[int] = set()
        matched_d: set[int] = set()
        # greedy association, highest IoU first
        for flat in np.argsort(-ious, axis=None):
            ti, di = divmod(int(flat), ious.shape[1])
            if ious[ti, di] < self.iou_threshold:
                break
            if ti in matched_t or di in matched_d:
                continue
            self.tracks[ti].update(detections[di])
            matched_t.add(ti)
            matched_d.add(di)
        for i, track in enumerate(self.tracks):
            if i not in matched_t:
                track.misses += 1
        self.tracks = [track for track in self.tracks if track.misses <= self.max_misses]
        for di, det in enumerate(detections):
            if di not in matched_d:
                state = np.zeros(8)
                state[:4] = _to_z(det)
                self.tracks.append(Track(self._next_id, state))
                self._next_id += 1
        return [(track.track_id, track.box) for track in self.tracks if track.misses == 0]


def synthetic_detections(frames: int, objects: int = 8, seed: int = 0) -> list[np.ndarray]:
    """Boxes of ``objects`` objects moving linearly with jitter, for profiling and tests."""
    rng = np.random.default_rng(seed)
    start = rng.uniform(0, 400, (objects, 2))
    vel = rng.uniform(-3, 3, (objects, 2))
    size = rng.uniform(20, 80, (objects, 2))
    out = []
    for frame_no in range(frames):
        xy = start + vel * frame_no + rng.normal(0, 1, (objects, 2))
        out.append(np.hstack([xy, xy + size]))
    return out


def time_tracker(batch: int, runs: int = 20, objects: int = 8, seed: int = 0) -> list[float]:
    """Wall time of processing ``batch`` consecutive frames, ``runs`` times (a warm tracker each run)."""
    frames = synthetic_detections(batch * (runs + 1), objects, seed)
    tracker = IouTracker()
    for frame in frames[:batch]:
        tracker.update(frame)
    out = []
    for run in range(1, runs + 1):
        t0 = time.perf_counter()
        for frame in frames[run * batch : (run + 1) * batch]:
            tracker.update(frame)
        out.append(time.perf_counter() - t0)
    return out
