"""The receipt journal (workers/receipts.py): what a worker holds survives its process; a restarted
agent releases it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.errors import QueueError
from workers import receipts as rc
from workers.receipts import ReceiptJournal, read_journal, release_left

if TYPE_CHECKING:
    from pathlib import Path


class FakeQueues:
    def __init__(self, fail: Exception | None = None):
        self.released: list[tuple[str, list[str]]] = []
        self.fail = fail

    def release(self, queue_url: str, receipts: list[str]) -> None:
        if self.fail is not None:
            raise self.fail
        self.released.append((queue_url, list(receipts)))


def test_the_journal_holds_what_was_received_and_not_deleted_or_released(tmp_path: Path) -> None:
    journal = ReceiptJournal(tmp_path, "q-a")
    journal.held(["r1", "r2", "r3"])
    journal.done(["r2"])
    journal.held(["r3", "r4"])  # r3 again (a second delivery in one receive): held once
    journal.done(["r9"])  # never held: nothing written
    assert journal.receipts() == ["r1", "r3", "r4"]
    assert read_journal(journal.path) == ("q-a", ["r1", "r3", "r4"])


def test_a_line_cut_short_by_a_crash_is_skipped(tmp_path: Path) -> None:
    journal = ReceiptJournal(tmp_path, "q-a")
    journal.held(["r1"])
    with journal.path.open("a") as raw:
        raw.write("+ ")  # the process died in the middle of this write
    assert read_journal(journal.path) == ("q-a", ["r1"])


def test_the_file_is_rewritten_with_what_is_held_and_young(tmp_path: Path, monkeypatch) -> None:
    # GIVEN a journal rewritten past 2 x held + 8 lines, with receipts older than 60 s dropped then
    monkeypatch.setattr(rc, "_COMPACT_LINES", 8)
    now = [0.0]
    journal = ReceiptJournal(tmp_path, "q-a", max_age_s=60.0, clock=lambda: now[0])
    journal.held(["old"])  # a failed batch's message: never deleted here, redelivered later
    now[0] = 100.0
    for k in range(10):
        journal.held([f"r{k}"])
        journal.done([f"r{k}"])
    journal.held(["kept"])
    journal.done(["x"])  # nothing: no rewrite needed for it
    # THEN the file holds the young receipt only, and stays small
    assert read_journal(journal.path) == ("q-a", ["kept"])
    assert len(journal.path.read_text().splitlines()) <= 2 + 2 * 8


def test_a_clean_stop_removes_the_file(tmp_path: Path) -> None:
    journal = ReceiptJournal(tmp_path, "q-a")
    journal.held(["r1"])
    journal.close()
    assert list(tmp_path.iterdir()) == []


def test_a_restart_releases_what_every_journal_still_holds_and_removes_them(tmp_path: Path) -> None:
    # GIVEN two workers' journals left by a killed process (one on a queue since deleted)
    a, b = ReceiptJournal(tmp_path, "q-a"), ReceiptJournal(tmp_path, "q-b")
    a.held(["a1", "a2", "a3"])
    a.done(["a2"])
    b.held(["b1"])
    b.done(["b1"])
    # WHEN the agent starts again THEN the receipts still held are released, per queue, and the
    # journals are gone (a journal holding nothing costs no call)
    queues = FakeQueues()
    assert release_left(tmp_path, queues) == 2  # type: ignore[arg-type]
    assert queues.released == [("q-a", ["a1", "a3"])]
    assert list(tmp_path.iterdir()) == []
    assert release_left(tmp_path / "missing", queues) == 0  # type: ignore[arg-type]


def test_a_release_that_fails_is_left_to_the_visibility_timeout(tmp_path: Path) -> None:
    ReceiptJournal(tmp_path, "q-a").held(["a1"])
    queues = FakeQueues(fail=QueueError("throttled", queue_url="q-a"))
    assert release_left(tmp_path, queues) == 0  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_the_journals_live_in_the_state_directory_one_per_instance(tmp_path: Path) -> None:
    from workers.instance import receipts_dir

    assert receipts_dir("i-1", {"SKINFLINT_STATE_DIR": str(tmp_path)}) == tmp_path / "i-1" / "receipts"
    # systemd's StateDirectory= (cdk/userdata.py) names it in $STATE_DIRECTORY
    assert receipts_dir("i-1", {"STATE_DIRECTORY": "/var/lib/skinflint"}).parts[:4] == (
        "/", "var", "lib", "skinflint",
    )  # fmt: skip
