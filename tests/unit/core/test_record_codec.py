"""core/record_codec.py: records compressed against a preset dictionary, and every older stream read."""

from __future__ import annotations

import json
import zlib

import pytest

from core.record_codec import DICTIONARIES, RECORD_DICTIONARY, pack_docs, unpack_docs

DOCS = [
    {
        "r": "1c8b00601cbf819eb3748c2b4e53d500",
        "task": {
            "task_id": "detector", "module": "detector", "status": "done", "hardware": "t4",
            "emulated": False, "enqueued_at": 1795768727.8650029, "started_at": 1795768727.8750029,
            "finished_at": 1795768727.8850029, "batch_size": 8,
            "output": {"shape": [1, 1000], "argmax": 684, "max": 6.2527, "provider": "CPUExecutionProvider"},
        },
    },
    {
        "r": "1c8b00601cbf819eb3748c2b4e53d500", "w": "1/2",
        "task": {
            "task_id": "detector/vehicle.0", "module": "vehicle", "status": "done", "hardware": "t4",
            "emulated": False, "enqueued_at": 1795768727.8911, "started_at": 1795768727.9123,
            "finished_at": 1795768727.9311, "batch_size": 16, "output": {"argmax": 3, "max": 0.91},
        },
    },
]  # fmt: skip


def test_a_record_round_trips_and_is_smaller_than_plain_zlib() -> None:
    blob = pack_docs(DOCS)
    assert unpack_docs(blob) == DOCS
    plain = zlib.compress(json.dumps(DOCS, separators=(",", ":")).encode(), 6)
    assert len(blob) < 0.8 * len(plain)
    # the stream names its dictionary (RFC 1950 FDICT + its Adler-32)
    assert blob[1] & 0x20 and int.from_bytes(blob[2:6], "big") == zlib.adler32(RECORD_DICTIONARY)
    assert set(DICTIONARIES.values()) == {RECORD_DICTIONARY}


def test_a_record_written_without_a_dictionary_still_reads() -> None:
    plain = zlib.compress(json.dumps(DOCS, separators=(",", ":")).encode(), 6)
    assert unpack_docs(plain) == DOCS


def test_an_unknown_dictionary_or_a_damaged_stream_is_a_zlib_error() -> None:
    other = zlib.compressobj(6, zdict=b"some other dictionary")
    foreign = other.compress(b"[]") + other.flush()
    with pytest.raises(zlib.error, match="unknown dictionary"):
        unpack_docs(foreign)
    with pytest.raises(zlib.error):
        unpack_docs(pack_docs(DOCS)[:-8])  # truncated
    with pytest.raises(zlib.error):
        unpack_docs(b"not zlib at all")
