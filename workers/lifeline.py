"""Parent-death guard: a child process of the local stack stops when the process that started it is gone.

The local stack starts its children (moto's server, the front under uvicorn, one instance agent per
emulated instance; locust under ``skinflint loadtest``) in new sessions (``start_new_session=True``),
so a Ctrl-C in the terminal reaches only the parent, which then stops them in order
(``LocalStack.stop``). When the parent dies without that shutdown (SIGKILL, the OOM killer, a crash
that skips the cleanup), nothing else would ever stop them: a moto server holding its port, agents
polling it, all on the machine's cores. The guard closes that hole:

- the spawner names itself in ``SKINFLINT_PARENT_PID`` (:func:`child_env`);
- the child calls :func:`install` once its SIGTERM handler is in place: a thread checks about once a
  second (``poll_s``) that the parent is still there and, when it is gone, sends its own process SIGTERM:
  the path a normal stop takes (moto exits, an agent drains and releases what its workers hold, a
  worker releases its buffered messages, uvicorn and locust shut down). moto's server waits
  ``SERVER_LINGER_S`` first, so the agents drain against it as in the ordered stop. A process still
  running ``grace_s`` after its SIGTERM exits at once (``os._exit(FORCED_EXIT)``);
- :func:`install` then names this process in its own ``SKINFLINT_PARENT_PID``, so a process it starts
  in turn (inheriting the environment) watches its direct parent: the chain unwinds one level a poll;
- third-party entry points (uvicorn, locust) run under ``python -m workers.lifeline
  MODULE ARG...`` (:func:`module_argv`): the guard is armed, then MODULE runs in the same process as
  ``python -m MODULE ARG...`` would (same pid, its own signal handlers).

Without the variable the guard is off: on EC2, systemd runs the instance agent (its parent is pid 1)
and stops it itself.

"The parent is gone" is exact when the named process is this one's parent at :func:`install` (the
spawner always is): the kernel reparents an orphan at once, so ``os.getppid()`` changes the moment the
parent exits, zombie or not, and a reused pid cannot fool it. This works on every POSIX system
(elsewhere the guard stays off). A named process that is already not the parent at :func:`install` is
watched by pid (``kill(pid, 0)``, a zombie counting as gone where ``/proc`` tells): when it no longer
exists, the parent died between the fork and the guard and the process stops at once; when it does
(the variable was inherited past the process it names), the process stops when that one is gone.

``prctl(PR_SET_PDEATHSIG)`` is not used: it is Linux only, and it fires when the *thread* that forked
the child exits, not its process. The fleet emulator starts agents from its reconcile thread and a
test may start the stack from any thread: a thread ending would stop healthy children.
"""

from __future__ import annotations

import _thread
import importlib
import os
import runpy
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, MutableMapping, Sequence

__all__ = [
    "FORCED_EXIT",
    "GRACE_S",
    "PARENT_PID_ENV",
    "POLL_S",
    "SERVER_LINGER_S",
    "Lifeline",
    "child_env",
    "install",
    "main",
    "module_argv",
    "process_exists",
]

# Bound when this module is imported, before anything monkey-patches the interpreter (locust imports
# gevent's ``monkey.patch_all()``, which makes ``threading`` start greenlets and ``time.sleep`` yield to
# its loop): the guard is a real OS thread that sleeps for real, whatever the process does after.
_start_os_thread = _thread.start_new_thread
_sleep = time.sleep

PARENT_PID_ENV = "SKINFLINT_PARENT_PID"
POLL_S = 1.0  # s between checks of the parent
GRACE_S = 20.0  # s from the SIGTERM to a hard exit (an agent drains in 0.1-2 s)
# s moto's server outlives an orphaned stack (moto_server.main): the agents drain against it first, as
# in LocalStack.stop's order (fleet, front, moto); without it their drains fail on a closed port
SERVER_LINGER_S = 5.0
FORCED_EXIT = 70  # exit status of a process that did not stop within GRACE_S of its SIGTERM


def child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) naming this process as the child's parent."""
    out = dict(os.environ if env is None else env)
    out[PARENT_PID_ENV] = str(os.getpid())
    return out


def module_argv(module: str, args: Sequence[str] = ()) -> list[str]:
    """The command running ``python -m module args...`` with the guard armed (same process)."""
    return [sys.executable, "-m", "workers.lifeline", module, *args]


def process_exists(pid: int) -> bool:
    """Whether ``pid`` is a running process: not gone, and not a zombie where ``/proc`` tells."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: it exists
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return True  # no /proc here (or it went just now): kill(pid, 0) answered
    state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]  # the field after "(comm)"
    return state not in (b"Z", b"X", b"x")


def _say(message: str) -> None:
    """One line on stderr (the child's log): no lock, safe from any thread, gevent or not."""
    try:
        os.write(2, f"lifeline[{os.getpid()}]: {message}\n".encode())
    except OSError:
        pass


def _sigterm_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


@dataclass
class Lifeline:
    """A running guard: ``parent_pid`` watched every ``poll_s``; ``on_gone`` ``delay_s`` after it is
    found gone (default: SIGTERM to this process), then, unless ``grace_s`` is None, a hard exit
    ``grace_s`` later."""

    parent_pid: int
    by_ppid: bool  # True: the parent is os.getppid() (exact); False: watched by pid
    poll_s: float = POLL_S
    grace_s: float | None = GRACE_S
    on_gone: Callable[[], None] = _sigterm_self
    delay_s: float = 0.0
    fired: bool = False  # the parent was found gone

    def parent_alive(self) -> bool:
        if self.by_ppid:
            return os.getppid() == self.parent_pid
        return process_exists(self.parent_pid)

    def start(self) -> Lifeline:
        """Start watching on a real OS thread (never joined: it ends with the process, as a daemon
        thread does; it imports nothing and takes no lock, so it is safe beside gevent)."""
        _start_os_thread(self._watch, ())
        return self

    def _watch(self) -> None:
        while self.parent_alive():
            _sleep(self.poll_s)
        later = f" in {self.delay_s:g} s" if self.delay_s > 0 else ""
        _say(f"parent process {self.parent_pid} is gone; stopping{later} (SIGTERM)")
        self.fired = True
        _sleep(self.delay_s)
        try:
            self.on_gone()
        except Exception as exc:  # noqa: BLE001 - the hard exit below must still come
            _say(f"stopping failed: {exc!r}")
        if self.grace_s is None:
            return
        _sleep(self.grace_s)
        _say(f"still running {self.grace_s:g} s after the parent left; exiting now")
        os._exit(FORCED_EXIT)


def install(
    *,
    poll_s: float = POLL_S,
    grace_s: float | None = GRACE_S,
    on_gone: Callable[[], None] | None = None,
    delay_s: float = 0.0,
    environ: MutableMapping[str, str] | None = None,
) -> Lifeline | None:
    """Watch the process named in ``SKINFLINT_PARENT_PID`` (``environ``, default ``os.environ``) and
    stop this one when it is gone (see the module doc). Call it once the process's SIGTERM handler is
    installed; ``delay_s`` postpones the stop (moto's server: :data:`SERVER_LINGER_S`). Returns None,
    doing nothing, when the variable is unset (the guard is off), or not a
    pid (said on stderr)."""
    env = os.environ if environ is None else environ
    raw = env.get(PARENT_PID_ENV, "").strip()
    if not raw:
        return None
    try:
        pid = int(raw)
        if pid <= 0:
            raise ValueError(raw)
    except ValueError:
        _say(f"{PARENT_PID_ENV}={raw!r} is not a process id; the parent-death guard is off")
        return None
    if os.name != "posix":  # no reparenting to watch, and os.kill(pid, 0) would end the process there
        _say("the parent-death guard needs a POSIX system; it is off")
        return None
    by_ppid = os.getppid() == pid
    if not by_ppid and process_exists(pid):
        _say(f"process {pid} ({PARENT_PID_ENV}) is not this process's parent; watching it by pid")
    env[PARENT_PID_ENV] = str(os.getpid())  # what this process starts watches this process
    guard = Lifeline(pid, by_ppid, poll_s, grace_s, on_gone or _sigterm_self, delay_s)
    return guard.start()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m workers.lifeline MODULE [ARG...]``: arm the guard, then run MODULE as
    ``python -m MODULE ARG...`` would, in this process (its exit status is the process's)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-"):
        print("usage: python -m workers.lifeline MODULE [ARG...]", file=sys.stderr)
        return 2
    module, rest = args[0], args[1:]
    # the module's package first: one that patches the interpreter when imported (locust: gevent's
    # monkey.patch_all) must do so while this process has one thread (gevent deadlocks on the import
    # lock otherwise); a parent that dies meanwhile is found gone by install()
    importlib.import_module(module.split(".", 1)[0])
    install()  # the module's own SIGTERM handling (uvicorn, locust) takes over once it sets it
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
