"""A deterministic synthetic traffic video: vehicles (boxes) and pedestrians (ellipses) moving over a
road, drawn with numpy/PIL and encoded as JPEG. Nothing is downloaded."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

__all__ = ["synthetic_frames"]


@dataclass(frozen=True)
class _Car:
    start_x: float  # px at frame 0
    lane: float  # top edge, fraction of the height
    speed: float  # px per frame (negative: leftwards)
    color: tuple[int, ...]  # RGB
    length: float  # px


@dataclass(frozen=True)
class _Person:
    start_x: float  # px at frame 0
    speed: float  # px per frame


def synthetic_frames(
    count: int, width: int = 320, height: int = 240, seed: int = 7, quality: int = 80
) -> list[bytes]:
    rng = np.random.default_rng(seed)
    # background: sky, grass, a road with lane markings, fixed per video
    bg = Image.new("RGB", (width, height), (120, 170, 220))
    draw = ImageDraw.Draw(bg)
    draw.rectangle((0, height * 0.35, width, height), fill=(70, 130, 60))
    draw.rectangle((0, height * 0.5, width, height * 0.85), fill=(60, 60, 65))
    for mark in range(0, width, 40):
        draw.rectangle((mark, height * 0.67, mark + 20, height * 0.69), fill=(230, 230, 230))
    cars = [
        _Car(
            start_x=float(rng.uniform(0, width)),
            lane=float(rng.choice([0.55, 0.72])),
            speed=float(rng.uniform(2, 6)) * (1 if rng.random() < 0.5 else -1),
            color=tuple(int(channel) for channel in rng.integers(30, 255, 3)),
            length=float(rng.uniform(30, 50)),
        )
        for _ in range(4)
    ]
    people = [
        _Person(start_x=float(rng.uniform(0, width)), speed=float(rng.uniform(-1.5, 1.5))) for _ in range(3)
    ]
    noise = rng.integers(0, 12, size=(height, width, 3), dtype=np.uint8)
    frames: list[bytes] = []
    for index in range(count):
        img = bg.copy()
        dr = ImageDraw.Draw(img)
        for car in cars:
            left = (car.start_x + car.speed * index) % (width + 60) - 30
            top = height * car.lane
            dr.rectangle((left, top, left + car.length, top + 18), fill=car.color, outline=(0, 0, 0))
        for person in people:
            left = (person.start_x + person.speed * index) % width
            dr.ellipse((left, height * 0.4, left + 8, height * 0.48), fill=(230, 200, 170))
            dr.rectangle((left + 1, height * 0.48, left + 7, height * 0.5 - 2), fill=(40, 40, 160))
        arr = np.asarray(img, dtype=np.uint8)
        arr = np.clip(arr.astype(np.int16) + np.roll(noise, index, axis=1) - 6, 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, format="JPEG", quality=quality)
        frames.append(buf.getvalue())
    return frames
