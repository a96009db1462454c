"""The local stack's moto server stops when the process that started it dies without stopping it
(``workers/lifeline.py``): the real launcher (``python -m skinflint.local.moto_server``,
as ``LocalStack`` starts it) under an intermediate parent that is SIGKILLed; the server must exit
through its SIGTERM handler and free its port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from skinflint.local.stack import free_port
from tests.unit.workers.test_lifeline import PARENT  # the intermediate parent (`skinflint up`'s role)
from workers.lifeline import SERVER_LINGER_S, process_exists

pytestmark = pytest.mark.functional

REPO = Path(__file__).resolve().parents[2]


def wait_for(what, timeout_s: float, every_s: float = 0.1) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if what():
            return True
        time.sleep(every_s)
    return bool(what())


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_the_moto_server_exits_and_frees_its_port_when_its_parent_is_killed(tmp_path):
    port = free_port()
    log = tmp_path / "moto.log"
    server = [sys.executable, "-m", "skinflint.local.moto_server", "-H", "127.0.0.1", "-p", str(port)]
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(log), *server], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    moto = int(parent.stdout.readline())
    try:
        # GIVEN the server answering (moto imports for seconds on a loaded host)
        assert wait_for(lambda: answers(f"http://127.0.0.1:{port}/moto-api/"), 90), log.read_text()
        # WHEN its parent is SIGKILLed: nothing stops the server in order
        parent.kill()
        parent.wait(timeout=10)
        # THEN the server stops by itself (its guard polls every second; it lingers 5 s) and its port is
        # free
        assert wait_for(lambda: not process_exists(moto), 30), log.read_text()
        assert wait_for(lambda: port_free(port), 10)
        assert not answers(f"http://127.0.0.1:{port}/moto-api/")
    finally:
        for pid in (parent.pid, moto):
            if process_exists(pid):
                os.kill(pid, signal.SIGKILL)
        parent.wait(timeout=10)
        parent.stdout.close()
    said = log.read_text()
    # it outlived its parent by SERVER_LINGER_S (the agents drain against it first), then stopped
    linger = f"in {SERVER_LINGER_S:g} s"
    assert f"lifeline[{moto}]: parent process {parent.pid} is gone; stopping {linger} (SIGTERM)" in said
    assert "Traceback" not in said and "exiting now" not in said  # SIGTERM's path, not the hard exit
