"""The receipts a worker holds, journalled on local disk, so that a crash does not hold its messages.

A received SQS message stays invisible until its worker deletes it (processed) or releases it
(``ChangeMessageVisibility`` 0, :meth:`core.adapters.queues.TaskQueues.release`), or until the
queue's visibility timeout ends (30 s). A worker process killed with messages in hand (a crash, the
OOM killer, ``kill -9``) does neither: without this journal the messages wait out the timeout, and
the front counts them as backlog meanwhile (``TaskQueues.depth`` is visible + in flight), so it
refuses frames for the whole timeout although the restarted agent serves again within seconds
(issue #28: 30 s of ``queue_backlog`` refusals after a CPU agent crash, the agent back after 5-6 s).

- :class:`ReceiptJournal` (one per worker, one file): the worker writes ``+ RECEIPT`` for every
  message it receives and ``- RECEIPT`` once it deleted or released it. Lines are appended with one
  ``write`` per receive or delete call on an ``O_APPEND`` descriptor, no ``fsync``: a dead process's
  writes are in the kernel already, and a dead machine's instance is gone with its messages' worker
  anyway. The file is rewritten with the receipts still held once it has grown well past them;
  a receipt older than ``max_age_s`` is dropped then (its message came back after the visibility
  timeout long ago: a failed batch, a message left for the DLQ). A clean stop removes the file.
- :func:`release_left` (the instance agent, when it starts, before any worker): releases the
  receipts every journal left by a previous process of the agent still holds, one
  ``ChangeMessageVisibilityBatch`` per 10 on the journal's queue, so the restarted workers receive
  them at once, and removes the journals. A receipt SQS no longer knows (the message was deleted, or
  received again with a new receipt) fails on its own entry and changes nothing.

Everything is per SQS message receipt: what a message carries does not matter here.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from core.adapters.queues import queue_gone
from core.errors import DataPlaneError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path

    from core.adapters.queues import TaskQueues

__all__ = ["JOURNAL_SUFFIX", "ReceiptJournal", "read_journal", "release_left"]

log = logging.getLogger("skinflint.receipts")

JOURNAL_SUFFIX = ".receipts"
_COMPACT_LINES = 1024  # lines beyond twice the receipts held before the file is rewritten (~400 KB)
_names = itertools.count()


class ReceiptJournal:
    """The receipts one worker holds on one queue, in a file of ``directory`` (see the module doc)."""

    def __init__(
        self,
        directory: Path,
        queue_url: str,
        *,
        max_age_s: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        directory.mkdir(parents=True, exist_ok=True)
        self.queue_url = queue_url
        self.max_age_s = max_age_s
        self._clock = clock
        self.path = directory / f"{os.getpid()}-{next(_names)}{JOURNAL_SUFFIX}"
        self._held: dict[str, float] = {}  # receipt -> clock() when received
        self._lines = 0
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._open(f"@ {queue_url}\n")

    def _open(self, text: str) -> None:
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._write(text)

    def _write(self, text: str) -> None:
        if self._fd is None or not text:
            return
        try:
            os.write(self._fd, text.encode())
        except OSError as exc:  # a full disk must not stop serving: the timeout still frees them
            log.warning("cannot write the receipt journal %s: %s", self.path, exc)

    def held(self, receipts: Iterable[str]) -> None:
        """Receipts just received."""
        now = self._clock()
        with self._lock:
            new = [receipt for receipt in receipts if receipt not in self._held]
            for receipt in new:
                self._held[receipt] = now
            self._lines += len(new)
            self._write("".join(f"+ {receipt}\n" for receipt in new))

    def done(self, receipts: Iterable[str]) -> None:
        """Receipts deleted or released (or whose queue is gone)."""
        with self._lock:
            gone = [receipt for receipt in receipts if self._held.pop(receipt, None) is not None]
            self._lines += len(gone)
            self._write("".join(f"- {receipt}\n" for receipt in gone))
            if self._lines > 2 * len(self._held) + _COMPACT_LINES:
                self._compact()

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def receipts(self) -> list[str]:
        """The receipts held now."""
        with self._lock:
            return list(self._held)

    def _compact(self) -> None:
        """Rewrite the file with the receipts still held and younger than ``max_age_s`` (the caller
        holds the lock)."""
        now = self._clock()
        self._held = {r: at for r, at in self._held.items() if now - at <= self.max_age_s}
        text = f"@ {self.queue_url}\n" + "".join(f"+ {receipt}\n" for receipt in self._held)
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text(text)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("cannot rewrite the receipt journal %s: %s", self.path, exc)
            return
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._lines = len(self._held)

    def close(self) -> None:
        """A clean stop: forget the file (what is still held comes back after the visibility timeout)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self.path.unlink(missing_ok=True)


def read_journal(path: Path) -> tuple[str | None, list[str]]:
    """(queue URL, receipts still held) of a journal file; (None, []) when it has no header."""
    queue_url: str | None = None
    held: dict[str, None] = {}
    with path.open(errors="replace") as lines:
        for line in lines:
            kind, _, value = line.rstrip("\n").partition(" ")
            if not value:
                continue  # a line cut short by the crash
            if kind == "@":
                queue_url = value
            elif kind == "+":
                held[value] = None
            elif kind == "-":
                held.pop(value, None)
    return queue_url, list(held)


def release_left(directory: Path, queues: TaskQueues) -> int:
    """Release (visibility 0) what the journals in ``directory`` still hold, left by a process
    that did not stop cleanly, and remove them. Returns how many receipts were released. Call it
    before any worker of this process writes there."""
    if not directory.is_dir():
        return 0
    released = 0
    for path in sorted(directory.glob(f"*{JOURNAL_SUFFIX}")):
        try:
            queue_url, receipts = read_journal(path)
        except OSError as exc:
            log.warning("cannot read the receipt journal %s: %s", path, exc)
            continue
        if queue_url is not None and receipts:
            try:
                queues.release(queue_url, receipts)
                released += len(receipts)
                log.info("released %d message(s) a previous worker held on %s", len(receipts), queue_url)
            except DataPlaneError as exc:  # they come back after the visibility timeout instead
                if not queue_gone(exc):
                    log.warning("cannot release %d message(s) on %s: %s", len(receipts), queue_url, exc)
        path.unlink(missing_ok=True)
    for tmp in directory.glob("*.tmp"):
        tmp.unlink(missing_ok=True)
    return released
