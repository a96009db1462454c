"""The compressed form of a result record's tasks (core/adapters/results.py: a record item's ``tasks``
and a push message's): JSON, zlib-compressed against a **preset dictionary**.

A record holds a few terminal tasks and their ancestors, each a ``TaskOut`` whose field names,
statuses and providers repeat in every record. Plain zlib pays for the first occurrence of each in
every record; a preset dictionary (RFC 1950's FDICT) holding them lets the first occurrence refer back
to it. Measured on the traffic app's records (realistic timestamps and outputs): a lone task 338 ->
176 B, 16 tasks of 8 frames 1,274 -> 1,053 B, 20 tasks 1,546 -> 1,321 B. DynamoDB bills a record
item's write units per KB and stores it for the retention, so the bytes are the bill.

A stream names its dictionary by its Adler-32 (RFC 1950), so a reader decodes every version it knows
(:data:`DICTIONARIES`) and streams without one (records written before the dictionary): a new
dictionary is added beside the old ones, never in their place.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

__all__ = ["DICTIONARIES", "RECORD_DICTIONARY", "pack_docs", "unpack_docs"]

#: The dictionary of version 1: the strings a record's JSON repeats, the most frequent last (zlib
#: reaches the end of the dictionary with the shortest distances). Never edit it: add a new one.
RECORD_DICTIONARY = (
    b'"reason":"poison","reason":"stranded","output_s3_key":"outputs/","provider":"TensorrtExecutionProvider",'
    b'"provider":"CUDAExecutionProvider","device":"gpu","boxes":[[,"scores":[,"labels":[,"emulated":true,'
    b'"status":"dropped","hardware":"c6i.large","hardware":"v100","reason":"deadline"}},'
    b'{"r":"","task":{"task_id":"detector","module":"detector","status":"done","hardware":"t4",'
    b'"emulated":false,"enqueued_at":1795000000.0,"started_at":1795000000.0,"finished_at":1795000000.0,'
    b'"received_at":1795000000.0,"device_at":1795000000.0,"batch_size":8,"output":{"shape":[1,1000],'
    b'"argmax":0,"max":0.0,"provider":"CPUExecutionProvider","device":"cpu"}}},'
    b'{"r":"","w":"1/2","task":{"task_id":"detector/vehicle.0","module":"vehicle","status":"done",'
    b'"hardware":"t4","emulated":false,"enqueued_at":1795000000.0,"started_at":1795000000.0,'
    b'"finished_at":1795000000.0,"received_at":1795000000.0,"device_at":1795000000.0,"batch_size":16,'
    b'"output":{"shape":[1,1000],"argmax":0,"max":0.0,"provider":"CPUExecutionProvider","device":"cpu"}}}'
)
#: Every dictionary a reader knows, by the Adler-32 a stream names it with.
DICTIONARIES: dict[int, bytes] = {zlib.adler32(RECORD_DICTIONARY): RECORD_DICTIONARY}
_FDICT = 0x20  # RFC 1950: the FLG byte's preset-dictionary bit


def pack_docs(docs: list[dict[str, Any]]) -> bytes:
    """``docs`` as compact JSON, compressed (level 6) against :data:`RECORD_DICTIONARY`."""
    packer = zlib.compressobj(6, zdict=RECORD_DICTIONARY)
    raw = json.dumps(docs, separators=(",", ":")).encode()
    return packer.compress(raw) + packer.flush()


def unpack_docs(blob: bytes) -> Any:
    """The JSON a record's blob holds, whatever dictionary (or none) it was compressed with. Raises
    ``zlib.error`` for a damaged stream or one naming an unknown dictionary, ValueError for bad JSON."""
    if len(blob) >= 6 and blob[1] & _FDICT:
        dictionary = DICTIONARIES.get(int.from_bytes(blob[2:6], "big"))
        if dictionary is None:
            raise zlib.error(f"compressed with an unknown dictionary {blob[2:6].hex()}")
        unpacker = zlib.decompressobj(zdict=dictionary)
        raw = unpacker.decompress(blob) + unpacker.flush()
        if not unpacker.eof:
            raise zlib.error("incomplete or truncated stream")
    else:
        raw = zlib.decompress(blob)
    return json.loads(raw)
