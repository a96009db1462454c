"""moto's server for the local stack, without its per-request overheads (``python -m
skinflint.local.moto_server -H 127.0.0.1 -p PORT``).

moto's own ``moto.server`` spends about a quarter of its CPU outside the AWS APIs it emulates
(py-spy over a 40 s demo run: 2,107 busy samples): for every request it lists the moto package's
directories from disk (``list_of_moto_modules`` + ``isdir``: 15 %), under a lock that every request
takes, and logs a line through ``logging`` (8 %); Flask runs in debug mode. On 2 cores the server
is the stack's busiest process (0.7 of a core at 4 frames/s of the traffic app, 75 requests/s), so
its queueing is in every hop's latency. This runs the same application (moto's
``DomainDispatcherApplication`` and request handler, threaded, as ``moto.server.main`` does) with
the module list read once, no per-request log line (errors are still logged) and debug off. If
moto's internals move, it falls back to ``moto.server.main`` unchanged.

It also meters the requests it serves (:class:`RequestMeter`): ``GET /_skinflint/requests`` returns
the count per service and action since the server started (``{"total": N, "by_action":
{"sqs.SendMessageBatch": n, ...}, "cpu_s_by_action": ..., "max_wall_s_by_action": ..., "heavy":
[...], "gc": {...}, "by_caller": {"front": {"dynamodb.GetItem": n, ...}, ...}}``: requests, the
server's time on them, its garbage-collector pauses, and the requests of each process of the stack,
named by the ``app/<id>`` its SDK puts in the User-Agent (:data:`CALLER_ENV`, set per process by the
stack; ``other`` without one), which ``skinflint demo`` turns into AWS requests per frame (by action
and by caller) and this server's CPU per action. On AWS
those requests are billed by the request; here they are the load on this server.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import io
import json
import logging
import resource
import signal
import sys
import threading
import time
from collections import Counter, deque
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from workers.lifeline import SERVER_LINGER_S
from workers.lifeline import install as install_lifeline

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = [
    "CALLER_ENV",
    "FREEZE_PATH",
    "METER_PATH",
    "RETENTION_STATS",
    "GcMeter",
    "RequestMeter",
    "caller",
    "classify",
    "expire_data",
    "frozen_full_collections",
    "main",
    "retention_sweeper",
    "untrack_models",
]

#: Where the meter answers (a path no AWS API of the emulated services uses: S3 bucket names cannot
#: start with an underscore).
METER_PATH = "/_skinflint/requests"
#: ``POST`` here: a full collection and ``gc.freeze()`` now (the stack calls it once it is serving, so
#: what setting it up created is not walked by a collection during the stream)
FREEZE_PATH = "/_skinflint/gc-freeze"
_QUERY_BODY_LIMIT = 1 << 20  # form bodies read to find the action (query protocol); larger: "?"


def _service(environ: dict[str, Any]) -> str:
    """The signing name from SigV4's credential scope (``Credential=AKID/date/region/SERVICE/...``)."""
    auth = str(environ.get("HTTP_AUTHORIZATION", ""))
    at = auth.find("Credential=")
    if at < 0:
        return "unsigned"
    scope = auth[at + len("Credential=") :].split(",", 1)[0].split("/")
    return scope[3] if len(scope) > 3 else "unsigned"


#: the header a client of the local stack's stand-ins for AWS itself (the EMF extraction,
#: skinflint/local/emf.py) sends, so its requests are counted apart from the components'
EMULATION_HEADER = "X-Skinflint-Emulation"
EMULATION_PREFIX = "emulation-"


def classify(environ: dict[str, Any]) -> tuple[str, str]:
    """(service, action) of one request, from what each AWS protocol puts where: JSON protocols in
    ``X-Amz-Target`` (SQS, DynamoDB), Smithy RPC v2 in the path (CloudWatch:
    ``/service/X/operation/PutMetricData``), the query protocol in the form body's ``Action``
    (Auto Scaling, EC2; the body is put back for the application), S3 by method. A request with
    :data:`EMULATION_HEADER` has its service prefixed with :data:`EMULATION_PREFIX`: it is what AWS
    does by itself on the deployed stack, not a request of the components. Reads nothing else."""
    service, action = _classify(environ)
    if environ.get("HTTP_" + EMULATION_HEADER.upper().replace("-", "_")):
        return EMULATION_PREFIX + service, action
    return service, action


def _classify(environ: dict[str, Any]) -> tuple[str, str]:
    service = _service(environ)
    target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
    if target:
        return service, target.rsplit(".", 1)[-1]
    path = str(environ.get("PATH_INFO", ""))
    if "/operation/" in path:
        return service, path.rsplit("/operation/", 1)[-1].split("/", 1)[0]
    method = str(environ.get("REQUEST_METHOD", "GET"))
    ctype = str(environ.get("CONTENT_TYPE", ""))
    if method == "POST" and ctype.startswith("application/x-www-form-urlencoded"):
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if 0 < length <= _QUERY_BODY_LIMIT:
            body = environ["wsgi.input"].read(length)
            environ["wsgi.input"] = io.BytesIO(body)
            action = parse_qs(body.decode("utf-8", "replace")).get("Action", ["?"])[0]
            return service, action
        return service, "?"
    return service, method  # S3 (REST): GET / PUT / HEAD / DELETE / POST


#: The billing units AWS would charge for a request, as :func:`billing_units` estimates them.
BILLING_UNITS = (
    "dynamodb_write_units",  # 1 per KB of each item written (BatchWriteItem, PutItem); 1 per Update/Delete
    "dynamodb_read_units_strong",  # 1 per 4 KB read, consistent reads
    "dynamodb_read_units_eventual",  # 0.5 per 4 KB read, eventually consistent reads (Query default)
    "sqs_billed_requests",  # 1 per 64 KB of a request's payload (or of what a ReceiveMessage returned)
    "s3_put_requests",  # PUT-class (PUT, POST, LIST, COPY)
    "s3_get_requests",  # GET-class (GET, HEAD, the rest; DELETE is free)
)
_KB = 1024
_SQS_CHUNK = 64 * _KB


#: The environment variable the AWS SDKs read for the ``app/<id>`` part of their User-Agent: the
#: local stack sets it per process (``front``, ``instance-<hardware>``, ``stack``) and the meter counts
#: each caller's requests by it.
CALLER_ENV = "AWS_SDK_UA_APP_ID"


def caller(environ: dict[str, Any]) -> str:
    """The caller a request's User-Agent names (``app/<id>``, :data:`CALLER_ENV`); ``other``."""
    for part in str(environ.get("HTTP_USER_AGENT", "")).split():
        if part.startswith("app/") and len(part) > 4:
            return part[4:]
    return "other"


def _ddb_item_bytes(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB bills it, estimated: names + values in their JSON form."""
    return sum(len(name) + len(json.dumps(value, separators=(",", ":"))) for name, value in item.items())


def billing_units(service: str, action: str, request: bytes, response_bytes: int) -> dict[str, float]:
    """The billing units of one request (:data:`BILLING_UNITS`), estimated from its body and the size
    of its response: DynamoDB write units from the items written (an UpdateItem or DeleteItem: 1,
    its item unread), read units from the bytes returned (4 KB a unit, half for an eventually
    consistent read); SQS requests per 64 KB chunk; S3 PUT- and GET-class requests. Other services: none."""
    out: dict[str, float] = {}
    if service == "dynamodb":
        try:
            doc = json.loads(request) if request else {}
        except ValueError:
            doc = {}
        if action == "BatchWriteItem":
            units = 0
            for entries in (doc.get("RequestItems") or {}).values():
                for entry in entries:
                    item = (entry.get("PutRequest") or {}).get("Item")
                    units += max(1, -(-_ddb_item_bytes(item) // _KB)) if item else 1
            out["dynamodb_write_units"] = units
        elif action == "PutItem":
            out["dynamodb_write_units"] = max(1, -(-_ddb_item_bytes(doc.get("Item") or {}) // _KB))
        elif action in ("UpdateItem", "DeleteItem"):
            out["dynamodb_write_units"] = 1
        elif action in ("GetItem", "BatchGetItem", "Query", "Scan"):
            consistent = bool(doc.get("ConsistentRead")) or any(
                bool(want.get("ConsistentRead")) for want in (doc.get("RequestItems") or {}).values()
            )
            units = max(1, -(-response_bytes // (4 * _KB)))
            key = "dynamodb_read_units_strong" if consistent else "dynamodb_read_units_eventual"
            out[key] = units if consistent else units / 2
    elif service == "sqs":
        size = response_bytes if action == "ReceiveMessage" else len(request)
        out["sqs_billed_requests"] = max(1, -(-size // _SQS_CHUNK))
    elif service == "s3" and action != "DELETE":
        out["s3_put_requests" if action in ("PUT", "POST") else "s3_get_requests"] = 1
    return out


def _json_body(environ: dict[str, Any]) -> bytes:
    """A JSON-protocol request's body (read, then put back for the application); empty above 1 MB."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return b""
    if not 0 < length <= _QUERY_BODY_LIMIT:
        return b""
    body: bytes = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(body)
    return body


class GcMeter:
    """The garbage collector's pauses in this process (``gc.callbacks``): per generation the
    collections, their total and longest time, and the last ``KEPT`` pauses of at least ``LONG_S``
    (``[started_at, generation, seconds, collected]``). A full collection walks every object the
    server holds (every item and message stored so far) and holds the interpreter meanwhile: the
    request that triggers it, and every other one, waits."""

    LONG_S = 0.01
    KEPT = 200

    def __init__(self) -> None:
        self._start: tuple[float, float] | None = None
        # generation -> [collections, total s, max s]; every key exists from the start, so the
        # callback never changes the dict's size while a snapshot iterates it
        self._per_gen: dict[int, list[float]] = {generation: [0, 0.0, 0.0] for generation in range(-1, 3)}
        self._long: deque[tuple[float, int, float, int]] = deque(maxlen=self.KEPT)

    def install(self) -> GcMeter:
        gc.callbacks.append(self._callback)
        return self

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        """Runs inside every collection, in whichever thread triggered it: it must never wait. (It
        took a lock, which a snapshot also held while it allocated: a collection triggered in the
        snapshot called this, which waited for the snapshot's own lock, forever; the collector stays
        "collecting" meanwhile, so no collection ran in the server again and its memory grew by 1 GB
        an hour.) Collections never overlap, so the updates need no lock; a snapshot taken meanwhile
        may read a row half updated."""
        if phase == "start":
            self._start = (time.time(), time.perf_counter())
            return
        if self._start is None:
            return
        (at, t0), self._start = self._start, None
        took = time.perf_counter() - t0
        gen = int(info.get("generation", -1))
        row = self._per_gen.get(gen) or self._per_gen[-1]
        row[0] += 1
        row[1] += took
        row[2] = max(row[2], took)
        if took >= self.LONG_S:
            self._long.append((at, gen, took, int(info.get("collected", 0))))

    def snapshot(self) -> dict[str, Any]:
        """The figures so far. Never blocks a collection (see :meth:`_callback`): the rows are copied
        one at a time, and the pauses with one ``list`` of the deque (a collection triggered by that
        allocation runs before the copy starts)."""
        per_gen = {
            str(generation): {"collections": int(figures[0]), "total_s": figures[1], "max_s": figures[2]}
            for generation, figures in list(self._per_gen.items())
            if figures[0]
        }
        long = [list(pause) for pause in list(self._long)]
        return {"by_generation": dict(sorted(per_gen.items())), "long_pauses": long}


class RequestMeter:
    """WSGI middleware counting requests by (service, action) and the server's time on them;
    answers ``GET METER_PATH`` itself (not counted) with the figures as JSON.

    Per action: ``by_action`` (requests), ``cpu_s_by_action`` (the serving thread's CPU,
    ``time.thread_time``: what the action costs the server, whatever else runs) and
    ``max_wall_s_by_action`` (the longest request from call to response, waiting for the GIL and
    long polls included), since the server started. ``heavy`` lists the last ``HEAVY_KEPT``
    requests that took at least ``HEAVY_CPU_S`` of CPU (``[started_at, action, cpu_s, wall_s]``):
    while one runs, every other request waits its turn for the interpreter. moto builds its
    responses in the call, so the call is the request."""

    HEAVY_CPU_S = 0.02
    HEAVY_KEPT = 200

    def __init__(self, app: Callable[..., Iterable[bytes]], gc_meter: GcMeter | None = None):
        self._app = app
        self._gc = gc_meter
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._by_caller: dict[str, Counter[str]] = {}
        self._cpu: dict[str, float] = {}
        self._max_wall: dict[str, float] = {}
        self._heavy: deque[tuple[float, str, float, float]] = deque(maxlen=self.HEAVY_KEPT)
        self._billing: dict[str, float] = dict.fromkeys(BILLING_UNITS, 0.0)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            billing = dict(self._billing)
            counts = dict(self._counts)
            by_caller = {who: dict(sorted(seen.items())) for who, seen in sorted(self._by_caller.items())}
            cpu = dict(self._cpu)
            wall = dict(self._max_wall)
            heavy = [list(entry) for entry in self._heavy]
        return {
            "total": sum(counts.values()),
            "by_action": dict(sorted(counts.items())),
            "by_caller": by_caller,
            "cpu_s_by_action": dict(sorted(cpu.items())),
            "max_wall_s_by_action": dict(sorted(wall.items())),
            "heavy": heavy,
            "billing": billing,
            **({"gc": self._gc.snapshot()} if self._gc is not None else {}),
            "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "retention": dict(RETENTION_STATS),
        }

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == METER_PATH and environ.get("REQUEST_METHOD") == "GET":
            body = json.dumps(self.snapshot()).encode()
            headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
            start_response("200 OK", headers)
            return [body]
        if environ.get("PATH_INFO") == FREEZE_PATH and environ.get("REQUEST_METHOD") == "POST":
            t0 = time.perf_counter()
            collected = gc.collect()
            gc.freeze()
            took = time.perf_counter() - t0
            body = json.dumps(
                {"collected": collected, "frozen": gc.get_freeze_count(), "seconds": took}
            ).encode()
            start_response(
                "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
            )
            return [body]
        started, wall, cpu = time.time(), time.perf_counter(), time.thread_time()
        service, action = classify(environ)
        who = caller(environ)
        request = _json_body(environ) if service in ("dynamodb", "sqs") else b""
        response_bytes = 0
        try:
            chunks = list(self._app(environ, start_response))  # moto builds its response in the call
            response_bytes = sum(len(chunk) for chunk in chunks)
            return chunks
        finally:
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
            key = f"{service}.{action}"
            units = billing_units(service, action, request, response_bytes)
            with self._lock:
                for unit, value in units.items():
                    self._billing[unit] += value
                self._counts[key] += 1
                self._by_caller.setdefault(who, Counter())[key] += 1
                self._cpu[key] = self._cpu.get(key, 0.0) + cpu
                if wall > self._max_wall.get(key, 0.0):
                    self._max_wall[key] = wall
                if cpu >= self.HEAVY_CPU_S:
                    self._heavy.append((started, key, cpu, wall))


def untrack_models() -> None:
    """Stop moto keeping every model instance it ever created. ``BaseModel.__new__`` appends each
    instance to its class's ``instances_tracked`` list, for the dashboard's ``/moto-api/data.json`` and
    for a reset: every item written (and the one it replaced), every message sent (deleted or not, frame
    payload included) and every metric data point stays in memory for the server's life. The server
    grew by about 110 KB per traffic frame served, 0.6 GB in 15 minutes at 4 frames/s, whatever else
    was deleted. This server never resets and the stack never reads the dashboard's data, so instances
    are created untracked (the lists stay, empty): what the emulated services no longer hold is freed."""
    # moto (seconds to import) loads in the server process only: the stack and the EMF extractor
    # import this module for its paths and header names
    from moto.core.common_models import BaseModel

    def new(cls: type[Any], *_args: Any, **_kwargs: Any) -> Any:
        return object.__new__(cls)

    BaseModel.__new__ = new  # type: ignore[method-assign]


_partition = threading.local()  # the partition a Query of this thread reads (indexed_queries)


def indexed_queries() -> None:
    """Answer a Query of a table's own key from its partition, as DynamoDB does. moto 5 builds a
    Query's candidates from every item of the table (``Table.all_items``, sorted) and keeps those of
    the partition: about 100 ms of the server's CPU per Query once the local results table held a few
    thousand items, so each ``GET /v1/requests/{id}`` (one Query of its POST's partition) slowed as
    the stack ran, and every hop waited on the server. Here ``all_items``, while that thread's Query
    runs, lists the queried partition only; the rest of moto's Query (key conditions, sort,
    pagination, filters) is unchanged. Queries of an index keep moto's full scan."""
    from moto.dynamodb.models.table import Table  # moto: in the server process only

    scan_all = Table.all_items
    query = Table.query

    def all_items(self: Any) -> list[Any]:
        hint = getattr(_partition, "of", None)
        if hint is None or hint[0] is not self:
            return scan_all(self)
        return sorted(hint[1].values(), key=lambda item: item.range_key)

    def indexed_query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("index_name") or hash_key is None or not self.range_key_attr:
            return query(self, hash_key, *args, **kwargs)
        _partition.of = (self, dict(self.items.get(hash_key) or {}))
        try:
            return query(self, hash_key, *args, **kwargs)
        finally:
            _partition.of = None

    Table.all_items = all_items  # type: ignore[method-assign]
    Table.query = indexed_query  # type: ignore[method-assign]


def _fast_app() -> tuple[Any, Any]:
    """moto's dispatcher application and request handler with the overheads removed."""
    # moto loads in the server process only (see untrack_models)
    from moto import backends
    from moto.moto_server.werkzeug_app import (  # moto: in the server process only
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )

    listed = tuple(backends.list_of_moto_modules())  # the package's directories do not change
    backends.list_of_moto_modules = cache(lambda: listed)
    untrack_models()
    indexed_queries()

    class QuietHandler(MotoRequestHandler):
        def log_request(self, code: Any = "-", size: Any = "-") -> None:
            return None  # one line per request costs CPU in the server every hop waits on

    app = DomainDispatcherApplication(create_backend_app)
    app.debug = False  # type: ignore[attr-defined]
    return RequestMeter(app, GcMeter().install()), QuietHandler


def frozen_full_collections(period_s: float = 10.0) -> threading.Thread:
    """Keep the garbage collector's full collections short in this process: every ``period_s`` a
    full collection, then ``gc.freeze()``, so the objects that survived it (the items and messages
    stored so far, moto's modules) are never scanned again; a full collection, automatic or this
    one, walks only what was allocated since. Returns the (daemon) thread doing it.

    Left alone, a full collection walks every object the server holds, with the interpreter held:
    one took 129 ms a minute into a demo stream, and every request in flight waited for it (a
    ``SendMessageBatch`` measured 157 ms of the server's CPU instead of about 3; the tasks it
    delivered were that run's only ones over plan). Turning full collections off instead removed the
    pauses but left the cyclic garbage of requests that outlived two young collections (long polls):
    the server's peak RSS was 305 MB after a demo against 241 MB. What freezing costs: garbage
    cycles formed later among frozen objects (requests in flight at a freeze) are never freed."""

    def loop() -> None:
        while True:
            gc.collect()
            gc.freeze()
            time.sleep(period_s)

    thread = threading.Thread(target=loop, name="gc-freezer", daemon=True)
    thread.start()
    return thread


# --------------------------------------------------------------------------- retention


def _epoch_s(value: Any) -> float | None:
    """Seconds since the epoch of a moto timestamp (a datetime, naive = UTC, or an ISO string)."""

    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if isinstance(value, dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()
    return None


def _expire_items(now: float) -> int:
    """Delete the items past their TTL attribute from every table with TTL enabled (what DynamoDB's
    TTL does, within days there; moto records the setting and never deletes). Only tables with TTL are
    touched; each deletion is one dict operation (the results table is read and written by key only,
    never iterated by a request, so no request sees it change mid-way)."""
    from moto.dynamodb.models import dynamodb_backends  # moto: in the server process only

    deleted = 0
    for regions in list(dynamodb_backends.values()):
        for backend in list(regions.values()):
            for table in list(backend.tables.values()):
                ttl = getattr(table, "ttl", {}) or {}
                attr = ttl.get("AttributeName")
                if ttl.get("TimeToLiveStatus") != "ENABLED" or not attr:
                    continue
                deleted += _expire_table(table, attr, now)
    return deleted


def _expire_table(table: Any, attr: str, now: float) -> int:
    """Delete ``table``'s items past ``attr``. Partitions are visited in the order they were created
    (moto's dict) and the visit stops at the first one holding an item that has not expired: the
    partitions after it are newer (a request's items are written within seconds of its frame item), so
    a sweep costs what it deletes, not the table's size. A late write keeps the partitions behind it
    until it expires too."""

    def expiry(item: Any) -> float | None:
        value = item.attrs.get(attr)
        if value is None or value.type != "N":
            return None  # DynamoDB's TTL ignores items without a number there
        try:
            return float(value.value)
        except ValueError:
            return None

    deleted = 0
    for hash_key, entry in list(table.items.items()):
        items = [(None, entry)] if not table.range_key_attr else list(entry.items())
        live = False
        for range_key, item in items:
            at = expiry(item)
            if at is None:
                continue
            if at > now:
                live = True
                continue
            if range_key is None:
                table.items.pop(hash_key, None)
            else:
                entry.pop(range_key, None)
            deleted += 1
        if table.range_key_attr and not entry:  # empty: a write to it now would come a retention late
            table.items.pop(hash_key, None)
        if live:
            break
    return deleted


#: s: how far out of order metric data points may be put (writers flush their 1 s buckets every 1-5
#: seconds); the metric sweep reads the list up to the first point this much newer than its cutoff
_METRIC_DISORDER_S = 60.0


def _expire_metrics(before: float) -> tuple[int, int]:
    """Drop the CloudWatch data points stamped before ``before`` (moto keeps every one; the local stack
    keeps them only as long as it keeps the requests' items); returns (dropped, kept). The points are
    in the order they were put, their stamps within seconds of that order (each writer flushes its own
    buckets), so only the list's head is read: up to the first point :data:`_METRIC_DISORDER_S` newer
    than the cutoff. The old ones among those ``checked`` are removed with one slice assignment: a put
    meanwhile appends behind them and is kept, a read works on its own copy."""
    from moto.cloudwatch.models import cloudwatch_backends  # moto: in the server process only

    cutoff = dt.datetime.fromtimestamp(before, tz=dt.UTC)
    horizon = dt.datetime.fromtimestamp(before + _METRIC_DISORDER_S, tz=dt.UTC)
    dropped = kept = 0
    for regions in list(cloudwatch_backends.values()):
        for backend in list(regions.values()):
            data = backend.metric_data
            head = []
            for datum in list(data):
                at = datum.timestamp
                if not isinstance(at, dt.datetime):
                    epoch = _epoch_s(at)
                    at = dt.datetime.fromtimestamp(epoch, tz=dt.UTC) if epoch is not None else horizon
                elif at.tzinfo is None:
                    at = at.replace(tzinfo=dt.UTC)  # moto stamps naive UTC datetimes
                if at >= horizon:
                    break
                head.append(at < cutoff)
            checked = len(head)
            if any(head):
                data[:checked] = [item for item, old in zip(data[:checked], head, strict=True) if not old]
                dropped += sum(head)
            kept += len(data)
    return dropped, kept


#: What the sweeps did since the server started (``retention`` in the meter's answer).
RETENTION_STATS: dict[str, float] = {
    "sweeps": 0,
    "items_expired": 0,
    "metric_points_dropped": 0,
    "metric_points": 0,
    "last_sweep_s": 0.0,
}


def expire_data(now: float, metric_retention_s: float | None) -> dict[str, int]:
    """One sweep: DynamoDB items past their TTL, and (``metric_retention_s`` set) metric data points
    older than that. Returns what it removed (and the metric points left, when it looked at them)."""
    out = {"items": _expire_items(now), "metric_points": 0}
    if metric_retention_s is not None:
        out["metric_points"], out["metric_points_kept"] = _expire_metrics(now - metric_retention_s)
    return out


def retention_sweeper(period_s: float = 30.0, metric_retention_s: float | None = None) -> threading.Thread:
    """A daemon thread running :func:`expire_data` every ``period_s``: without it moto's memory grows
    with every request served (about 110 KB per traffic frame: its items, its metric data points, the
    requests' leftovers; 0.6 GB after 15 min at 4 frames/s, whether or not the collector freezes)."""

    def loop() -> None:
        log = logging.getLogger("skinflint.retention")
        while True:
            time.sleep(period_s)
            t0 = time.perf_counter()
            try:
                swept = expire_data(time.time(), metric_retention_s)
            except Exception:  # noqa: BLE001 - moto's internals moved: keep serving, say so once
                log.exception("retention sweep failed; items and metrics are no longer expired")
                return
            RETENTION_STATS["sweeps"] += 1
            RETENTION_STATS["items_expired"] += swept["items"]
            RETENTION_STATS["metric_points_dropped"] += swept["metric_points"]
            RETENTION_STATS["metric_points"] = swept.get("metric_points_kept", 0)
            RETENTION_STATS["last_sweep_s"] = time.perf_counter() - t0

    thread = threading.Thread(target=loop, name="retention-sweeper", daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m skinflint.local.moto_server")
    parser.add_argument("-H", "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("-p", "--port", type=int, required=True, help="port to listen on")
    parser.add_argument(
        "--plain-gc",
        action="store_true",
        help="leave the garbage collector as Python sets it (default: see frozen_full_collections)",
    )
    parser.add_argument(
        "--metric-retention-s",
        type=float,
        default=None,
        help="drop metric data points older than this (default: keep all); DynamoDB items past their TTL "
        "attribute are always deleted (retention_sweeper)",
    )
    parser.add_argument(
        "--sweep-s", type=float, default=30.0, help="seconds between retention sweeps (default 30)"
    )
    args = parser.parse_args(argv)
    if args.sweep_s <= 0 or (args.metric_retention_s is not None and args.metric_retention_s <= 0):
        parser.error("--sweep-s and --metric-retention-s must be positive")

    try:
        app, handler = _fast_app()
    except (ImportError, AttributeError) as exc:  # moto's layout changed: its own server, as is
        print(f"moto internals not as expected ({exc}); running moto.server", file=sys.stderr)
        from moto.server import main as moto_main  # moto: in the server process only

        install_lifeline(delay_s=SERVER_LINGER_S)  # the stack died: SIGTERM once the agents drained
        moto_main(["-H", args.host, "-p", str(args.port)])
        return
    from werkzeug.serving import run_simple  # moto's dependency: in the server process only

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    if not args.plain_gc:
        frozen_full_collections()
    retention_sweeper(args.sweep_s, args.metric_retention_s)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    # the stack that started this server died without stopping it: SIGTERM as above, once its instance
    # agents have drained against this server (they stop at once)
    install_lifeline(delay_s=SERVER_LINGER_S)
    run_simple(args.host, args.port, app, threaded=True, request_handler=handler)


if __name__ == "__main__":
    main()
