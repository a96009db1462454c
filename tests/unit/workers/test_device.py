"""The shared device of an instance: batches in window-close order, 1/c of the device each."""

from __future__ import annotations

import threading
import time

from workers.worker import Device


def run_batches(device: Device, batches: list[tuple[str, float, int]], hold_s: float = 0.05) -> list[str]:
    """Start every batch (name, close_at, concurrency) on its own thread while the device is held,
    then release it; returns the order in which they got the device."""
    order: list[str] = []
    lock = threading.Lock()

    def run(name: str, close_at: float, c: int) -> None:
        with device.slot(close_at, c):
            with lock:
                order.append(name)
            time.sleep(hold_s)

    with device.slot(close_at=-1.0):  # the device is busy while the others queue up
        threads = [threading.Thread(target=run, args=b) for b in batches]
        for t in threads:
            t.start()
            time.sleep(0.01)  # queued in this order: the reverse of their windows below
    for t in threads:
        t.join(5)
    return order


def test_batches_take_the_device_in_window_close_order_not_arrival_order():
    # GIVEN three exclusive (c = 1) batches queued latest window first
    order = run_batches(Device(), [("c", 3.0, 1), ("b", 2.0, 1), ("a", 1.0, 1)])
    # THEN they ran earliest window first: what the packing's added wait assumes
    assert order == ["a", "b", "c"]


def test_concurrency_two_batches_share_the_device_an_exclusive_one_waits():
    device = Device()
    spans: dict[str, tuple[float, float]] = {}

    def run(name: str, close_at: float, c: int) -> None:
        with device.slot(close_at, c):
            start = time.perf_counter()
            time.sleep(0.1)
            spans[name] = (start, time.perf_counter())

    # two halves (c = 2) fit together: 1/2 + 1/2 = 1; the c = 1 batch closes last and waits
    threads = [
        threading.Thread(target=run, args=a)
        for a in (("half1", 1.0, 2), ("half2", 1.1, 2), ("whole", 1.2, 1))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    (s1, e1), (s2, e2), (sw, _) = spans["half1"], spans["half2"], spans["whole"]
    assert s2 < e1 and s1 < e2  # the halves ran at the same time
    assert sw >= max(e1, e2)  # the exclusive batch had the device to itself
    assert device.busy_s >= 0.19  # 0.5 * 0.1 * 2 + 1 * 0.1


def test_a_single_worker_device_behaves_as_c_model_slots():
    device = Device()
    running = []
    peak = [0]
    lock = threading.Lock()

    def run(k: int) -> None:
        with device.slot(float(k), 3):
            with lock:
                running.append(k)
                peak[0] = max(peak[0], len(running))
            time.sleep(0.05)
            with lock:
                running.remove(k)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert peak[0] == 3
