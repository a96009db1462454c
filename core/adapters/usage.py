"""The AWS requests a process makes, and the units AWS bills them by, counted where they are made.

:func:`attach` registers on a boto3 client's event system (``core.clients.make_client`` calls it
for every data-plane client it makes with a component name): ``after-call`` counts every API call
(once, whatever the SDK's retries did underneath) per (service, operation), and the billing units of
its answer; ``before-parameter-build`` (DynamoDB, SQS, CloudWatch) notes what the units need from
the request. Counts are kept per process and component (:func:`meter`) in two dicts
under a lock -- the hook adds to a number, nothing is sent -- and go out with the component's metrics
(:func:`report_to`: at every flush of its :class:`~core.adapters.metrics.Metrics`) as

- ``AwsRequests`` (Component, Service, Operation): API calls answered, errors included;
- ``AwsRequestUnits`` (Component, Service, Unit): what AWS bills, estimated here (docs/report.md):

  * DynamoDB on-demand ``ReadRequestUnits``: per item read, 1 per 4 KB strongly consistent, 0.5
    eventually consistent, 2 transactional; a key read that finds nothing still costs 1 (0.5). A
    BatchGetItem counts each key it asked for and did not get back as unprocessed. Query and Scan
    are billed on the total size of the items they evaluate: the returned items' sizes, scaled by
    ``ScannedCount / Count`` for items a filter dropped (:data:`UNSEEN_ITEM_BYTES` each when none
    came back). ``ConsumedCapacity`` in an answer (a caller asked for it) is taken as it is.
  * DynamoDB ``WriteRequestUnits``: per item written, 1 per KB of the item as serialised in the
    request (DynamoDB's item-size rules, :func:`item_size`), 2 per KB transactional; a delete 1;
    an update counts its key and its expression values (DynamoDB bills the larger of the whole item
    before and after: an underestimate for large items). Writes refused on a condition
    (``ConditionalCheckFailedException``, ``TransactionCanceledException``) still consume;
    BatchWriteItem does not bill what it returns unprocessed.
  * SQS ``Requests``: every call is one request per 64 KB chunk of its payload (the larger of the
    messages it sends and the messages it receives, bodies and attributes).
  * CloudWatch ``Requests`` (PutMetricData and every other call) and ``MetricsRequested``
    (GetMetricData: its metric queries, once per page).
  * S3 ``PutClassRequests`` (PUT, COPY, POST, LIST, create and complete) and ``GetClassRequests``
    (GET, HEAD and every other call); DELETE and abort are free. Errors are billed too.
  * Lambda ``Requests`` (Invoke).
  * CloudWatch Logs ``IngestedBytes`` (:data:`LOGS_INGESTED`): the Embedded Metric Format lines the
    Lambda front writes instead of calling PutMetricData (``EmfMetrics``), each line's bytes plus the
    26 bytes CloudWatch Logs adds per event; counted after the flush that wrote them, so they go
    out with the next one. The EMF front publishes its counts at most every 10 s
    (``front.wiring.EMF_USAGE_EVERY_S``), not after every request: what a Lambda
    environment counted since its last such flush is lost when AWS retires it.
  * The front's own HTTP requests (:class:`HttpUsage`): ``apigateway`` ``HttpApiRequests`` per request
    behind the HTTP API (the deployed default), ``Requests`` behind the REST API
    (``SKINFLINT_FRONT_API=rest``, which ``-c front_api=rest`` sets; WAF inspects those), and
    ``lambda`` ``Requests`` and ``DurationMs`` (the handler's milliseconds, rounded up per request as
    Lambda rounds its billed duration): the report turns these into GB-seconds with the front's
    memory size.

Units other than DynamoDB's conditional writes and S3's are counted for answers with a 2xx status
only. Every other service's calls (Auto Scaling, EC2: API requests AWS does not bill) are requests
with no unit. ``SKINFLINT_USAGE_METERING=off`` turns all of it off (``core/settings.py``: no
client is attached, the front adds no middleware).

The flush's own PutMetricData calls are counted like any other, but never make a flush of their own:
counts that hold only those wait for the next flush with something else to say (otherwise an idle
process would publish one PutMetricData every flush interval, forever, to report the previous one).
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from core.adapters.metrics import Metrics

_M = TypeVar("_M", bound="Metrics")
__all__ = [
    "READ_UNIT_BYTES",
    "SQS_CHUNK_BYTES",
    "UNSEEN_ITEM_BYTES",
    "WRITE_UNIT_BYTES",
    "LOGS_INGESTED",
    "HttpUsage",
    "UsageMeter",
    "attach",
    "dynamodb_read_units",
    "dynamodb_write_units",
    "item_size",
    "meter",
    "prepare_dynamodb",
    "report_to",
    "s3_unit",
    "sqs_payload_bytes",
    "sqs_requests",
]

READ_UNIT_BYTES = 4096  # one DynamoDB read request unit reads up to 4 KB
WRITE_UNIT_BYTES = 1024  # one write request unit writes up to 1 KB
SQS_CHUNK_BYTES = 64 * 1024  # SQS bills each 64 KB chunk of a payload as one request
#: bytes assumed for each item a Query or Scan evaluated when it returned none to measure (a guess)
UNSEEN_ITEM_BYTES = 1024

#: (service, unit) of the EMF log bytes a component wrote (CloudWatch Logs ingestion)
LOGS_INGESTED = ("logs", "IngestedBytes")

_RRU, _WRU = "ReadRequestUnits", "WriteRequestUnits"
_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
_CONDITION_FAILED = frozenset({"ConditionalCheckFailedException", "TransactionCanceledException"})
_S3_FREE = ("Delete", "Abort")
_S3_PUT_CLASS = ("Put", "Copy", "Post", "List", "Create", "Complete", "Upload", "Restore")


# -- DynamoDB's item size ----------------------------------------------------------------------------
def _utf8(text: str | bytes) -> int:
    """UTF-8 length; an ASCII string (the usual case) is measured without encoding a copy."""
    if isinstance(text, str):
        return len(text) if text.isascii() else len(text.encode())
    return len(text)


def _number(number: str) -> int:
    """1 byte per two significant digits, + 1 (leading and trailing zeros counted: at most a byte
    or two over, without copying the string)."""
    digits = len(number) - number.startswith("-") - ("." in number)
    return (max(digits, 1) + 1) // 2 + 1


_SIZES: dict[str, Callable[[Any], int]] = {
    "S": _utf8,
    "N": _number,
    "B": len,
    "BOOL": lambda _: 1,
    "NULL": lambda _: 1,
    "SS": lambda values: sum(_utf8(text) for text in values),
    "NS": lambda values: sum(_number(number) for number in values),
    "BS": lambda values: sum(len(blob) for blob in values),
    "L": lambda values: 3 + sum(_value_size(element) + 1 for element in values),
    "M": lambda attributes: (
        3 + sum(_utf8(name) + _value_size(element) + 1 for name, element in attributes.items())
    ),
}


def _value_size(value: Mapping[str, Any]) -> int:
    """Bytes of one typed attribute value (``{"S": "abc"}``) by DynamoDB's item-size rules."""
    for kind, raw in value.items():
        if kind == "S":  # the usual case, first
            return len(raw) if raw.isascii() else _utf8(raw)
        size = _SIZES.get(kind)
        return size(raw) if size is not None else 0
    return 0


def item_size(item: Mapping[str, Any] | None) -> int:
    """An item's size in bytes as DynamoDB bills it: per attribute, its name's UTF-8 length and its
    value's (strings in UTF-8, numbers about one byte per two significant digits plus one, binary
    raw, booleans and nulls one byte, lists and maps 3 bytes plus one per element)."""
    total = 0
    for name, value in (item or {}).items():
        total += _utf8(name) + _value_size(value)
    return total


def _reads(size: int, factor: float) -> float:
    return max(1, math.ceil(size / READ_UNIT_BYTES)) * factor


def _writes(size: int, factor: float = 1.0) -> float:
    return max(1, math.ceil(size / WRITE_UNIT_BYTES)) * factor


def _write_request_units(request: Mapping[str, Any], factor: float = 1.0) -> float:
    """Write units of one BatchWriteItem request or TransactWriteItems item."""
    if "PutRequest" in request or "Put" in request:
        put = request.get("PutRequest") or request["Put"]
        return _writes(item_size(put.get("Item")), factor)
    if "Update" in request:
        return _update_units(request["Update"], factor)
    return _writes(0, factor)  # a delete or a condition check: the minimum


def _update_units(params: Mapping[str, Any], factor: float = 1.0) -> float:
    values = params.get("ExpressionAttributeValues") or {}
    size = item_size(params.get("Key")) + sum(_value_size(attr_value) for attr_value in values.values())
    return _writes(size, factor)


def _batch_get_keys(params: Mapping[str, Any]) -> dict[str, tuple[int, float]]:
    return {
        table: (len(req.get("Keys") or ()), 1.0 if req.get("ConsistentRead") else 0.5)
        for table, req in (params.get("RequestItems") or {}).items()
    }


_PREPARE: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "PutItem": lambda params: _writes(item_size(params.get("Item"))),
    "UpdateItem": _update_units,
    "DeleteItem": lambda params: _writes(0),
    "BatchWriteItem": lambda params: sum(
        _write_request_units(request)
        for reqs in (params.get("RequestItems") or {}).values()
        for request in reqs
    ),
    "TransactWriteItems": lambda params: sum(
        _write_request_units(request, 2.0) for request in params.get("TransactItems") or ()
    ),
    "GetItem": lambda params: 1.0 if params.get("ConsistentRead") else 0.5,
    "Query": lambda params: 1.0 if params.get("ConsistentRead") else 0.5,
    "Scan": lambda params: 1.0 if params.get("ConsistentRead") else 0.5,
    "BatchGetItem": _batch_get_keys,
}


def prepare_dynamodb(operation: str, params: Mapping[str, Any]) -> Any:
    """What a DynamoDB call's units need from its request (noted before it is sent): a write's units,
    a read's consistency factor, a BatchGetItem's keys and factor per table; None for the rest."""
    prepare = _PREPARE.get(operation)
    return prepare(params) if prepare is not None else None


def _consumed(parsed: Mapping[str, Any]) -> float | None:
    """``ConsumedCapacity``'s units when the answer carries them (one entry or a list)."""
    cc = parsed.get("ConsumedCapacity")
    if not cc:
        return None
    entries = cc if isinstance(cc, list) else [cc]
    return float(sum(entry.get("CapacityUnits", 0.0) for entry in entries))


def _scanned_units(parsed: Mapping[str, Any], factor: float) -> float:
    items = parsed.get("Items") or ()
    returned = sum(item_size(item) for item in items)
    count = int(parsed.get("Count", len(items)))
    scanned = int(parsed.get("ScannedCount", count))
    evaluated = returned * scanned / count if count > 0 else scanned * UNSEEN_ITEM_BYTES
    return max(1, math.ceil(evaluated / READ_UNIT_BYTES)) * factor


def _batch_get_units(prepared: Any, parsed: Mapping[str, Any]) -> float:
    """Each key asked for: its item's units, or the minimum when it found nothing; none for a key
    that came back unprocessed (the caller asks again, and that read is counted then)."""
    units = 0.0
    responses = parsed.get("Responses") or {}
    unprocessed = parsed.get("UnprocessedKeys") or {}
    for table, (keys, factor) in (prepared or {}).items():
        got = responses.get(table) or ()
        left = len((unprocessed.get(table) or {}).get("Keys") or ())
        units += sum(_reads(item_size(item), factor) for item in got)
        units += max(0, keys - left - len(got)) * factor
    return units


_READ_UNITS: dict[str, Callable[[Any, Mapping[str, Any]], float]] = {
    "GetItem": lambda prep, parsed: _reads(item_size(parsed.get("Item")), prep or 0.5),
    "Query": lambda prep, parsed: _scanned_units(parsed, prep or 0.5),
    "Scan": lambda prep, parsed: _scanned_units(parsed, prep or 0.5),
    "TransactGetItems": lambda _, parsed: sum(
        _reads(item_size(response.get("Item")), 2.0) for response in parsed.get("Responses") or ()
    ),
    "BatchGetItem": _batch_get_units,
}


def dynamodb_read_units(
    operation: str, prepared: Any, parsed: Mapping[str, Any], asked: bool = False
) -> float:
    """Read units of a DynamoDB read's successful answer (0 for an operation that reads nothing):
    its ``ConsumedCapacity`` when the request ``asked`` for it, else the estimate (moto answers
    BatchGetItem with a ConsumedCapacity of its own making, 1 per key, asked or not)."""
    units = _READ_UNITS.get(operation)
    if units is None:
        return 0.0
    consumed = _consumed(parsed) if asked else None
    return consumed if consumed is not None else units(prepared, parsed)


def dynamodb_write_units(
    operation: str,
    prepared: Any,
    parsed: Mapping[str, Any],
    error_code: str | None = None,
    asked: bool = False,
) -> float:
    """Write units of a DynamoDB write (0 for an operation that writes nothing): its answer's
    ``ConsumedCapacity`` when the request ``asked`` for it, else the request's estimate less what
    came back unprocessed; for a write refused on its condition, the request's estimate."""
    if operation not in _WRITES or not isinstance(prepared, float | int):
        return 0.0
    if error_code is not None:
        return float(prepared) if error_code in _CONDITION_FAILED else 0.0
    consumed = _consumed(parsed) if asked else None
    if consumed is not None:
        return consumed
    units = float(prepared)
    if operation == "BatchWriteItem":
        left = parsed.get("UnprocessedItems") or {}
        units -= sum(_write_request_units(request) for reqs in left.values() for request in reqs)
    elif parsed.get("Attributes"):  # ReturnValues gave the old or new item: bill the larger
        units = max(units, _writes(item_size(parsed["Attributes"])))
    return max(units, 0.0)


def _message_bytes(message: Mapping[str, Any]) -> int:
    """A message's payload: its body and its attributes (name, type and value)."""
    size = _utf8(message.get("MessageBody") or message.get("Body") or "")
    for name, attr in (message.get("MessageAttributes") or {}).items():
        value = attr.get("StringValue") or attr.get("BinaryValue") or ""
        size += _utf8(name) + _utf8(attr.get("DataType") or "") + _utf8(value)
    return size


def sqs_payload_bytes(operation: str, params: Mapping[str, Any]) -> int:
    """The payload a request sends: its messages (SendMessage, SendMessageBatch); 0 for the rest."""
    if operation == "SendMessage":
        return _message_bytes(params)
    if operation == "SendMessageBatch":
        return sum(_message_bytes(entry) for entry in params.get("Entries") or ())
    return 0


def sqs_requests(request_bytes: int, answer_bytes: int) -> int:
    """SQS requests billed for one call: one per 64 KB chunk of its payload, at least one."""
    return max(1, math.ceil(max(request_bytes, answer_bytes) / SQS_CHUNK_BYTES))


def s3_unit(operation: str) -> str | None:
    """The S3 request class ``operation`` is billed in: ``PutClassRequests``, ``GetClassRequests``,
    or None for the free ones (DELETE, abort)."""
    if operation.startswith(_S3_FREE):
        return None
    return "PutClassRequests" if operation.startswith(_S3_PUT_CLASS) else "GetClassRequests"


# -- the per-process counts ----------------------------------------------------------------------------
class UsageMeter:
    """One component's counts in this process: requests per (service, operation), units per
    (service, unit). :meth:`collect` moves them into a :class:`Metrics`."""

    #: the flush's own calls: alone, they wait for the next flush (see the module doc)
    _SELF = ("monitoring", "PutMetricData")

    def __init__(self, component: str):
        self.component = component
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str], float] = {}
        self._units: dict[tuple[str, str], float] = {}

    def add(self, request: tuple[str, str] | None, unit: tuple[str, str] | None, units: float = 0.0) -> None:
        """Count one request of ``request`` = (service, operation) and ``units`` of ``unit`` =
        (service, unit name); either may be None."""
        with self._lock:
            if request is not None:
                self._requests[request] = self._requests.get(request, 0.0) + 1.0
            if unit is not None and units:
                self._units[unit] = self._units.get(unit, 0.0) + units

    def add_units(self, unit: tuple[str, str], units: float) -> None:
        if units:
            with self._lock:
                self._units[unit] = self._units.get(unit, 0.0) + units

    def counts(self) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
        """A copy of the counts not yet collected: (requests, units)."""
        with self._lock:
            return dict(self._requests), dict(self._units)

    def take(self) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
        """The counts, which start again from zero; nothing when only the flush's own calls were
        counted since the last take."""
        with self._lock:
            if not any(key != self._SELF for key in self._requests):
                return {}, {}
            requests, units = self._requests, self._units
            self._requests, self._units = {}, {}
        return requests, units

    def clear(self) -> None:
        """Forget every count (tests; a process that will not publish what it counted so far)."""
        with self._lock:
            self._requests, self._units = {}, {}

    def collect(self, metrics: Metrics) -> None:
        """Put the counts into ``metrics`` (``AwsRequests``, ``AwsRequestUnits``) and start again."""
        requests, units = self.take()
        for (service, operation), request_count in requests.items():
            metrics.put(
                "AwsRequests",
                request_count,
                "Count",
                Component=self.component,
                Service=service,
                Operation=operation,
            )
        for (service, unit), unit_count in units.items():
            metrics.put(
                "AwsRequestUnits", unit_count, "Count", Component=self.component, Service=service, Unit=unit
            )


_meters: dict[str, UsageMeter] = {}
_meters_lock = threading.Lock()


def meter(component: str) -> UsageMeter:
    """This process's meter of ``component`` (``front``, ``worker``, ``instance``, ``control``)."""
    with _meters_lock:
        usage_meter = _meters.get(component)
        if usage_meter is None:
            usage_meter = _meters[component] = UsageMeter(component)
        return usage_meter


def report_to(metrics: _M, component: str) -> _M:
    """Publish ``component``'s counts with every flush of ``metrics``; returns ``metrics``. With
    metering off no client is attached (``make_client``), so there is never anything to publish."""
    metrics.add_collector(meter(component).collect)
    return metrics


# -- the client hooks ------------------------------------------------------------------------------------
class _ClientHook:
    """Handlers of one client's events; the keys of its operations made once each."""

    _STASH = "skinflint_usage"
    _ASKED = "skinflint_usage_asked"  # a DynamoDB request that asked for its ConsumedCapacity

    def __init__(self, meter: UsageMeter, service: str):
        self.meter = meter
        self.service = service
        self._ops: dict[str, tuple[str, str]] = {}
        self._units: dict[str, tuple[str, str]] = {}

    def key(self, operation: str) -> tuple[str, str]:
        key = self._ops.get(operation)
        if key is None:
            key = self._ops[operation] = (self.service, operation)
        return key

    def unit(self, name: str) -> tuple[str, str]:
        key = self._units.get(name)
        if key is None:
            key = self._units[name] = (self.service, name)
        return key

    # before-parameter-build (DynamoDB, SQS, CloudWatch): what the units need from the request
    def before_params(self, params: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        if self.service == "sqs":
            context[self._STASH] = sqs_payload_bytes(model.name, params)
        elif self.service == "dynamodb":
            context[self._STASH] = prepare_dynamodb(model.name, params)
            if params.get("ReturnConsumedCapacity", "NONE") != "NONE":
                context[self._ASKED] = True
        elif model.name == "GetMetricData":
            queries = params.get("MetricDataQueries") or ()
            context[self._STASH] = sum(1 for query in queries if "MetricStat" in query)

    def after_call(
        self, http_response: Any, parsed: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        op = model.name
        status = getattr(http_response, "status_code", 200)
        ok = status < 300
        prepared = context.get(self._STASH)
        service = self.service
        if service == "dynamodb":
            code = None if ok else (parsed.get("Error") or {}).get("Code", "?")
            asked = context.get(self._ASKED, False)
            reads = dynamodb_read_units(op, prepared, parsed, asked) if ok else 0.0
            writes = dynamodb_write_units(op, prepared, parsed, code, asked)
            self.meter.add(self.key(op), self.unit(_RRU), reads)
            self.meter.add_units(self.unit(_WRU), writes)
        elif service == "sqs":
            answer = sum(_message_bytes(message) for message in parsed.get("Messages") or ()) if ok else 0
            requests = sqs_requests(prepared or 0, answer) if ok else 0
            self.meter.add(self.key(op), self.unit("Requests"), requests)
        elif service == "monitoring":
            if op == "GetMetricData":
                self.meter.add(self.key(op), self.unit("MetricsRequested"), float(prepared or 0) if ok else 0)
            else:
                self.meter.add(self.key(op), self.unit("Requests"), 1.0 if ok else 0.0)
        elif service == "s3":
            cls = s3_unit(op)
            billed = cls is not None and status < 500
            self.meter.add(self.key(op), self.unit(cls) if cls else None, 1.0 if billed else 0.0)
        elif service == "lambda":
            self.meter.add(self.key(op), self.unit("Requests"), 1.0 if ok else 0.0)
        else:
            self.meter.add(self.key(op), None)


def attach(client: Any, component: str) -> Any:
    """Count ``client``'s calls in :func:`meter` (``component``); returns the client. Attaching a
    client twice counts it once (the handlers are registered under fixed ids)."""
    service = client.meta.service_model.endpoint_prefix
    hook = _ClientHook(meter(component), service)
    events = client.meta.events
    if service in ("dynamodb", "sqs", "monitoring"):
        events.register("before-parameter-build", hook.before_params, unique_id="skinflint-usage-params")
    events.register("after-call", hook.after_call, unique_id="skinflint-usage-after")
    return client


# -- the front's own requests (API Gateway -> Lambda) --------------------------------------------------
class HttpUsage:
    """ASGI middleware of the front: every HTTP request is one API Gateway request and one Lambda
    invocation of the front (cdk/stacks/front.py), billed for its duration (rounded up to a whole
    millisecond per request). Counts per route template (``POST /v1/apps/{app_name}/frames``), so
    the operation names stay few. Under uvicorn (the local stack) the same figures say what the
    deployed front would be billed for the same requests."""

    def __init__(self, app: Any, meter: UsageMeter, api: str = "http"):
        if api not in ("http", "rest"):
            raise ValueError(f"the front's API is 'http' or 'rest', got {api!r}")
        self.app = app
        self.meter = meter
        self._keys: dict[tuple[str, str], tuple[str, str]] = {}
        # the unit its price is listed under (profiles/aws_prices.json): an HTTP API request, or a REST
        # API request (which the web ACL's WAF requests are derived from)
        self._api = ("apigateway", "HttpApiRequests" if api == "http" else "Requests")
        self._invoke = ("lambda", "Invocation")
        self._requests = ("lambda", "Requests")
        self._duration = ("lambda", "DurationMs")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            ms = math.ceil((time.perf_counter() - t0) * 1e3)
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = str(scope.get("method", "?"))
            key = self._keys.get((method, route))
            if key is None:
                key = self._keys[(method, route)] = ("apigateway", f"{method} {route}")
            usage_meter = self.meter
            usage_meter.add(key, self._api, 1.0)
            usage_meter.add(self._invoke, self._requests, 1.0)
            usage_meter.add_units(self._duration, float(ms))
