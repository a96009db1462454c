"""The parent-death guard of the local stack's children (``workers/lifeline.py``).

The process tests put an intermediate "parent" (a Python process that starts the child with
``child_env()`` and then sleeps) between the test and the child, SIGKILL it, and check that the child
stops through its own SIGTERM handler. Every wait is a poll loop with a generous deadline (2 shared
cores); the guards here poll every 0.1-0.2 s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from workers import lifeline
from workers.lifeline import PARENT_PID_ENV, child_env, install, module_argv, process_exists

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

REPO = Path(__file__).resolve().parents[3]
DEADLINE_S = 20.0  # s for a stop the guard makes within ~0.2 s on an idle machine

# The intermediate parent: starts argv[2:] with child_env(), stdout and stderr to argv[1], prints the
# child's pid, then sleeps until it is killed.
PARENT = """
import subprocess, sys, time
from workers.lifeline import child_env
with open(sys.argv[1], "ab") as log:
    child = subprocess.Popen(sys.argv[2:], env=child_env(), stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
print(child.pid, flush=True)
time.sleep(600)
"""

# A child with a SIGTERM handler (the entry points' pattern): the handler writes "sigterm" to the
# marker file argv[1] and exits 0. It arms the guard (polling every 0.2 s, 2 s of grace), writes
# "armed" to argv[2], and, with a third argument, starts itself again as a grandchild (same
# environment, so the grandchild watches this process) with marker argv[3] and ready file argv[4].
CHILD = """
import os, signal, subprocess, sys, time
from workers import lifeline
marker, ready = sys.argv[1], sys.argv[2]
def on_term(*_):
    with open(marker, "w") as fh:
        fh.write("sigterm")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
guard = lifeline.install(poll_s=0.2, grace_s=2.0)
if len(sys.argv) > 3:
    subprocess.Popen([sys.executable, __file__, *sys.argv[3:5]], start_new_session=True)
with open(ready, "w") as fh:
    fh.write(f"{os.getpid()} {guard.parent_pid if guard else 'off'} {os.environ.get('SKINFLINT_PARENT_PID')}")
while True:
    time.sleep(0.5)
"""


def wait_for(what: Callable[[], bool], timeout_s: float = DEADLINE_S, every_s: float = 0.05) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if what():
            return True
        time.sleep(every_s)
    return what()


def read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture
def started() -> Iterator[list[int]]:
    """Pids a test started, directly or not: SIGKILLed at the end, whatever happened."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if process_exists(pid):
            kill_quietly(pid)


def stop_parent(parent: subprocess.Popen[str]) -> None:
    kill_quietly(parent.pid)
    parent.wait(timeout=10)
    if parent.stdout is not None:
        parent.stdout.close()


def spawn_parent(argv: list[str], log: Path) -> tuple[subprocess.Popen[str], int]:
    """The intermediate parent running ``argv`` as its child; (parent, child pid)."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(log), *argv], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    line = parent.stdout.readline()  # the child's pid, once it is started
    assert line.strip().isdigit(), f"the intermediate parent failed: {line!r} {read(log)}"
    return parent, int(line)


def test_child_env_names_this_process_and_copies():
    given = {"A": "1", PARENT_PID_ENV: "12"}
    env = child_env(given)
    assert env == {"A": "1", PARENT_PID_ENV: str(os.getpid())}
    assert given[PARENT_PID_ENV] == "12"  # the caller's mapping is left as it was
    assert child_env()[PARENT_PID_ENV] == str(os.getpid())


def test_module_argv_runs_the_module_under_the_guard():
    assert module_argv("uvicorn", ["app:app", "--port", "1"]) == [
        sys.executable, "-m", "workers.lifeline", "uvicorn", "app:app", "--port", "1",
    ]  # fmt: skip


@pytest.mark.parametrize("value", ["", "  ", "abc", "0", "-3", "1.5"])
def test_the_guard_is_off_without_a_parent_pid(value: str, capfd: pytest.CaptureFixture[str]):
    # the variable unset or empty (EC2: systemd runs the agent) or not a pid: nothing is armed
    env = {PARENT_PID_ENV: value}
    assert install(environ=env, on_gone=lambda: pytest.fail("fired")) is None
    assert env == {PARENT_PID_ENV: value}
    said = capfd.readouterr().err
    assert ("is not a process id" in said) == bool(value.strip())
    assert install(environ={}) is None


def test_a_zombie_counts_as_gone():
    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc: a zombie cannot be told from a live process")
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert process_exists(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        # not reaped yet: kill(pid, 0) still succeeds, /proc says Z
        assert wait_for(lambda: not process_exists(proc.pid))
        os.kill(proc.pid, 0)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert not process_exists(proc.pid)


def test_a_named_process_that_is_not_the_parent_is_watched_by_pid(capfd: pytest.CaptureFixture[str]):
    # GIVEN a live process that is not this one's parent, named in the variable
    other = subprocess.Popen(["sleep", "60"])
    gone = threading.Event()
    env = {PARENT_PID_ENV: str(other.pid)}
    try:
        guard = install(environ=env, poll_s=0.05, grace_s=None, on_gone=gone.set)
        assert guard is not None and guard.parent_pid == other.pid and not guard.by_ppid
        # what this process starts watches this process
        assert env[PARENT_PID_ENV] == str(os.getpid())
        assert "is not this process's parent" in capfd.readouterr().err
        assert not gone.wait(0.3) and not guard.fired
    finally:
        # WHEN it dies (and is reaped)
        other.kill()
        other.wait(timeout=10)
    # THEN the guard fires
    assert gone.wait(DEADLINE_S) and guard.fired
    assert f"parent process {other.pid} is gone" in capfd.readouterr().err


def test_the_stop_can_wait_after_the_parent_is_found_gone(capfd: pytest.CaptureFixture[str]):
    # moto's server lingers (SERVER_LINGER_S) so the agents drain against it first
    other = subprocess.Popen(["sleep", "60"])
    stopped: list[float] = []
    guard = install(
        environ={PARENT_PID_ENV: str(other.pid)},
        poll_s=0.05,
        grace_s=None,
        delay_s=0.5,
        on_gone=lambda: stopped.append(time.monotonic()),
    )
    assert guard is not None
    killed = time.monotonic()  # before the kill: the guard may see it gone before wait() returns
    other.kill()
    other.wait(timeout=10)
    assert wait_for(lambda: bool(stopped))
    assert stopped[0] - killed >= 0.5
    assert f"parent process {other.pid} is gone; stopping in 0.5 s (SIGTERM)" in capfd.readouterr().err


def test_the_parent_of_this_process_is_watched_through_getppid():
    guard = lifeline.Lifeline(os.getppid(), by_ppid=True)
    assert guard.parent_alive()
    assert not lifeline.Lifeline(os.getppid() + 10**7, by_ppid=True).parent_alive()


def test_a_child_stops_through_its_sigterm_handler_when_its_parent_is_killed(tmp_path, started):
    log, marker, ready = tmp_path / "child.log", tmp_path / "marker", tmp_path / "ready"
    parent, child = spawn_parent([sys.executable, "-c", CHILD, str(marker), str(ready)], log)
    started += [parent.pid, child]
    try:
        assert wait_for(lambda: bool(read(ready))), read(log)
        pid, watched, exported = read(ready).split()
        assert (int(pid), int(watched)) == (child, parent.pid)
        assert exported == str(child)  # its own children would watch it
        assert process_exists(child) and not read(marker)  # the parent is alive: nothing happens
        # WHEN the parent is SIGKILLed (no shutdown of its children)
        parent.kill()
        parent.wait(timeout=10)
        # THEN the child stops, through its SIGTERM handler, within a few polls
        assert wait_for(lambda: not process_exists(child)), read(log)
    finally:
        stop_parent(parent)
    assert read(marker) == "sigterm"
    assert f"lifeline[{child}]: parent process {parent.pid} is gone; stopping (SIGTERM)" in read(log)


def test_the_chain_unwinds_a_grandchild_watches_its_own_parent(tmp_path, started):
    log = tmp_path / "child.log"
    marks = [tmp_path / "marker-child", tmp_path / "ready-child"]
    grand = [tmp_path / "marker-grandchild", tmp_path / "ready-grandchild"]
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    parent, child = spawn_parent([sys.executable, str(script), *map(str, marks + grand)], log)
    started += [parent.pid, child]
    try:
        assert wait_for(lambda: bool(read(grand[1]) and read(marks[1]))), read(log)
        grandchild, watched, _ = read(grand[1]).split()
        started.append(int(grandchild))
        assert int(watched) == child  # its direct parent, not the stack's process
        parent.kill()
        parent.wait(timeout=10)
        assert wait_for(lambda: not process_exists(child) and not process_exists(int(grandchild))), read(log)
    finally:
        stop_parent(parent)
    assert read(marks[0]) == read(grand[0]) == "sigterm"
    said = read(log)
    assert f"lifeline[{child}]: parent process {parent.pid} is gone" in said
    assert f"lifeline[{grandchild}]: parent process {child} is gone" in said


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait(timeout=10)
    return proc.pid


def test_a_parent_gone_before_the_guard_is_armed_stops_the_child_at_once(tmp_path):
    marker, ready = tmp_path / "marker", tmp_path / "ready"
    env = {**os.environ, PARENT_PID_ENV: str(dead_pid())}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(marker), str(ready)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr  # sys.exit(0) in its SIGTERM handler
    assert read(marker) == "sigterm"
    assert "is gone; stopping (SIGTERM)" in proc.stderr


def test_a_child_that_ignores_sigterm_exits_hard_after_the_grace():
    code = (
        "import signal, time; from workers import lifeline; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); lifeline.install(poll_s=0.1, grace_s=0.5); "
        "time.sleep(60)"
    )
    env = {**os.environ, PARENT_PID_ENV: str(dead_pid())}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == lifeline.FORCED_EXIT, proc.stderr
    assert "exiting now" in proc.stderr and time.monotonic() - started < 50


def test_the_wrapper_runs_the_module_as_main_with_its_arguments():
    proc = subprocess.run(
        module_argv("json.tool", ["--sort-keys"]),
        cwd=REPO,
        input='{"b": 1, "a": 2}',
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["{", '"a":', "2,", '"b":', "1", "}"]
    for args in ([], ["--help"]):
        bad = subprocess.run(
            module_argv("")[:3] + args, cwd=REPO, capture_output=True, text=True, timeout=60, check=False
        )
        assert bad.returncode == 2 and "usage:" in bad.stderr


LOCUSTFILE = """
from locust import HttpUser, constant, task

class Probe(HttpUser):
    wait_time = constant(0.5)

    @task
    def get(self):
        self.client.get("/")
"""


def test_locust_under_the_wrapper_stops_through_its_sigterm_handler(tmp_path):
    # locust imports gevent's monkey.patch_all: the guard must still be a real thread that sleeps for
    # real (a greenlet sleeping with time.sleep would stall locust's loop), and gevent must patch
    # while the process has one thread (the wrapper imports the package before arming the guard)
    (tmp_path / "probe_users.py").write_text(LOCUSTFILE)
    other = subprocess.Popen(["sleep", "120"])  # the "parent" locust watches (by pid)
    csv = tmp_path / "run"
    argv = module_argv(
        "locust",
        ["-f", str(tmp_path / "probe_users.py"), "--headless", "--host", "http://127.0.0.1:9",
         "-u", "1", "-r", "1", "--run-time", "120s", "--csv", str(csv), "--only-summary",
         "--exit-code-on-error", "0"],
    )  # fmt: skip
    env = {**os.environ, PARENT_PID_ENV: str(other.pid)}
    log = tmp_path / "locust.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        # GIVEN locust running (its stats history is written every second once it runs)
        assert wait_for(lambda: Path(f"{csv}_stats_history.csv").exists(), 60), read(log)
        assert proc.poll() is None
        # WHEN the process it watches dies
        other.kill()
        other.wait(timeout=10)
        # THEN locust shuts down through its own SIGTERM handler (reports written, exit status 0)
        proc.wait(timeout=DEADLINE_S)
    finally:
        other.kill()
        other.wait(timeout=10)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    said = read(log)
    assert proc.returncode == 0, said
    assert "Got SIGTERM signal" in said and f"parent process {other.pid} is gone" in said
    assert Path(f"{csv}_stats.csv").exists()
