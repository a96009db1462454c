"""The plan store: versioned fleet plans on the config table, flipped atomically.

A *version* is a set of immutable items, all written with ``attribute_not_exists(pk)``::

    plan#v00000007#manifest          Manifest (version, created_at, activate_at, reason, apps, previous)
    plan#v00000007#app#<app>         the app's Deployment (DAG, plan, schedule origin, queues)
    plan#v00000007#fleet             the FleetPlan (instances per hardware type and their shares)
    plan#v00000007#claim#<slot>      which instance holds a slot (conditional write: one holder)

then the *pointer* ``plan#current`` is flipped with a conditional write on the version the writer
read (:class:`VersionConflictError` when another writer won). The pointer carries the manifest; its
``previous`` is the version the front was serving when the new one was published (not a version
published earlier that never activated). The one thing that changes after publishing is the
activation time: :meth:`PlanStore.set_activation` moves ``activate_at`` earlier once the version's
slots are served (a conditional rewrite of the pointer on the manifest read; the version's items,
and so every reader's view of the plan, are untouched). Readers read the pointer, then the
version's items: every item of a version exists before the pointer names it and none changes
afterwards, so a reader never sees half a plan. The pointer is read consistently (a poller reads
its hints instead, below); a version's deployments and fleet (immutable) eventually consistently,
and consistently only when that read does not find them (written a moment before the pointer named
them). ``plan#seq`` hands out
version numbers (an atomic counter), so a writer that crashed half-way leaves an orphan, never a
half-written version that a later writer would collide with.

Documents larger than :data:`INLINE_LIMIT` bytes (a 100-app fleet plan) are split into parts
(``<key>#p<i>``, binary) under a head item that carries their count and the SHA-256 of the whole;
a reader checks the checksum. DynamoDB's item limit is 400 KB.

**Readers that poll** (every front instance, every second: the activation notice is 3 s) do not
read the pointer itself: at 50,000 frames/s thousands of front instances would make it a hot key
(3,000 read units per second per partition) and read the whole manifest each time. Every pointer
write is framed by :data:`HINTS` small *hint* items (``plan#current#h<i>``, the SHA-256 of the
pointer's document): before the write, every hint is set to the new document's checksum without the
document (*pending*: "the pointer may be changing to this"); after it succeeds, each hint still
pending on that checksum is given the document too when it is at most :data:`HINT_DOC_BYTES`
(*settled*, a conditional write: a later writer's pending hint wins). A reader
(:meth:`PlanStore.current_hinted`) reads one hint (its own, chosen at random: the reads spread over
:data:`HINTS` keys) with one eventually consistent read (half a read unit: no strongly consistent
read while nothing changes); a hint whose checksum is the manifest the reader holds, or one it held
before, means no change; a settled hint of a later pointer document (a higher version, or the same
version activating earlier) is that document; an older one is a replica behind, ignored; anything
else (pending, missing, failed) sends it to the pointer itself, read consistently. A hint only ever
carries a document after the pointer held it, and every writer makes the hints pending before it
writes, so a settled hint names a document the pointer held (a writer reads the pointer before its
pending write); read from a replica behind, perhaps one it held a moment ago, never one older than
what the reader holds. The front (every second, through its cache) and the instance agents (every
``poll_s``) poll this way.

Instances report what they serve with :meth:`PlanStore.put_instance` (``instance#<id>``: every
version whose shares they still run, :class:`InstanceStatus`); the control loop's garbage collector
deletes a version once no live instance serves it.

The documents it keeps (manifest, claims, heartbeats) are defined in :mod:`core.adapters.plan_records`.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from core.adapters._aws import AWS_ERRORS, error_code
from core.adapters.plan_records import AppEntry, Claim, InstanceStatus, Manifest, slot_content
from core.errors import ConfigError
from core.schema import Deployment
from planner.packing import FleetPlan

if TYPE_CHECKING:
    from collections.abc import Iterable

    from planner.packing import Instance

__all__ = [
    "HINTS",
    "HINT_DOC_BYTES",
    "INLINE_LIMIT",
    "AppEntry",
    "Claim",
    "InstanceStatus",
    "Manifest",
    "PlanStore",
    "PlanStoreError",
    "VersionConflictError",
    "hint_key",
    "slot_content",
]

INLINE_LIMIT = 300_000  # bytes of a document stored in its head item; larger ones are split in parts
POINTER = "plan#current"
SEQUENCE = "plan#seq"
HINTS = 16  # hint items of the pointer (plan#current#h00..15): polling readers spread over them
# bytes: a pointer document this small rides in its settled hints (with the key and checksum, one
# read unit of 4 KB); a larger one leaves them pending and a reader reads the pointer once per change
HINT_DOC_BYTES = 3_800
_PREFIX = "plan#v"
_WRITERS = 8  # parallel PutItem calls when writing a version
_REPLACED_KEPT = 16  # replaced pointer checksums a polling reader remembers


class PlanStoreError(ConfigError):
    """A plan-store item is missing, corrupt (checksum) or a DynamoDB call failed."""


class VersionConflictError(PlanStoreError):
    """Another writer flipped the pointer first: ``expected`` was read, ``actual`` is current."""

    def __init__(self, expected: int | None, actual: int | None):
        super().__init__(
            f"plan version conflict: expected current version {expected}, found {actual}", key=POINTER
        )
        self.expected = expected
        self.actual = actual


def _vkey(version: int, *parts: str) -> str:
    return f"{_PREFIX}{version:08d}#" + "#".join(parts)


def hint_key(shard: int) -> str:
    """The key of the pointer's hint ``shard`` (0 to :data:`HINTS` - 1)."""
    return f"{POINTER}#h{shard:02d}"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pointer_order(a: Manifest, b: Manifest) -> int:
    """Which of two pointer documents the pointer held later: 1 ``a``, -1 ``b``, 0 cannot tell
    (same version and activation). A publish raises the version; ``set_activation`` keeps the
    version and moves ``activate_at`` earlier (or keeps it, recording a deadline: 0 here)."""
    if a.version != b.version:
        return 1 if a.version > b.version else -1
    if a.activate_at != b.activate_at:
        return 1 if a.activate_at < b.activate_at else -1
    return 0


def _load_fleet(text: str) -> FleetPlan:
    return FleetPlan.model_validate_json(text)


class PlanStore:
    """Versioned plans on the config table (``pk`` string key). Thread-safe (boto3 clients are)."""

    def __init__(self, client: Any, table: str, hint_shard: int | None = None):
        self._ddb = client
        self._table = table
        # the hint this reader polls (current_hinted): at random, so readers spread over the HINTS keys
        self._hint_shard = (random.randrange(HINTS) if hint_shard is None else hint_shard) % HINTS  # noqa: S311
        self._seen: tuple[str, Manifest] | None = None  # the pointer document's checksum and manifest
        # checksums of pointer documents this reader held and saw replaced: a hint naming one is a
        # replica behind (a pointer document never comes back: versions and activations only move on)
        self._replaced: deque[str] = deque(maxlen=_REPLACED_KEPT)

    # -- low-level items ------------------------------------------------------------------------
    def _get(self, pk: str, consistent: bool = True) -> dict[str, Any] | None:
        try:
            item = self._ddb.get_item(
                TableName=self._table, Key={"pk": {"S": pk}}, ConsistentRead=consistent
            ).get("Item")
        except AWS_ERRORS as exc:
            raise PlanStoreError(f"cannot read {pk}: {exc}", key=pk) from exc
        return item if item else None

    def _batch_get(self, keys: list[str], consistent: bool = True) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for i in range(0, len(keys), 100):
            request: dict[str, Any] = {
                self._table: {
                    "Keys": [{"pk": {"S": key}} for key in keys[i : i + 100]],
                    "ConsistentRead": consistent,
                }
            }
            for attempt in range(8):
                try:
                    page = self._ddb.batch_get_item(RequestItems=request)
                except AWS_ERRORS as exc:
                    raise PlanStoreError(f"cannot read {len(keys)} plan items: {exc}") from exc
                for item in page.get("Responses", {}).get(self._table, []):
                    out[item["pk"]["S"]] = item
                request = page.get("UnprocessedKeys") or {}
                if not request:
                    break
                time.sleep(0.02 * 2**attempt)
            if request:
                raise PlanStoreError("DynamoDB left plan items unread after 8 tries")
        return out

    def _put_new(self, item: dict[str, Any]) -> None:
        pk = item["pk"]["S"]
        try:
            self._ddb.put_item(
                TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)"
            )
        except AWS_ERRORS as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                raise PlanStoreError(f"{pk} already exists (versions are immutable)", key=pk) from exc
            raise PlanStoreError(f"cannot write {pk}: {exc}", key=pk) from exc

    def _delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        for i in range(0, len(keys), 25):
            left: dict[str, Any] = {
                self._table: [{"DeleteRequest": {"Key": {"pk": {"S": key}}}} for key in keys[i : i + 25]]
            }
            for attempt in range(8):
                try:
                    left = self._ddb.batch_write_item(RequestItems=left).get("UnprocessedItems") or {}
                except AWS_ERRORS as exc:
                    raise PlanStoreError(f"cannot delete plan items: {exc}") from exc
                if not left:
                    break
                time.sleep(0.02 * 2**attempt)
            if left:
                raise PlanStoreError("DynamoDB left plan items undeleted after 8 tries")

    # -- documents (inline or in checksummed parts) -----------------------------------------------
    @staticmethod
    def _doc_items(pk: str, text: str) -> list[dict[str, Any]]:
        data = text.encode()
        digest = _sha(data)
        if len(data) <= INLINE_LIMIT:
            return [{"pk": {"S": pk}, "doc": {"S": text}, "sha256": {"S": digest}, "parts": {"N": "0"}}]
        parts = [data[i : i + INLINE_LIMIT] for i in range(0, len(data), INLINE_LIMIT)]
        head = {"pk": {"S": pk}, "sha256": {"S": digest}, "parts": {"N": str(len(parts))}}
        return [head] + [{"pk": {"S": f"{pk}#p{i}"}, "data": {"B": part}} for i, part in enumerate(parts)]

    def _immutable_get(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """Items that never change once written (a version's deployments, fleet and their parts):
        an eventually consistent read (half a read unit), then a consistent one of those it did not
        return. An item that exists is returned whole or not at all, and its content is the same in
        every replica that has it: only "not yet there" needs the consistent read (an item written
        a moment before the pointer named its version)."""
        got = self._batch_get(keys, consistent=False)
        missing = [key for key in keys if key not in got]
        if missing:
            got.update(self._batch_get(missing))
        return got

    def _read_doc(self, pk: str, head: dict[str, Any] | None = None, immutable: bool = False) -> str | None:
        if head is None:
            head = self._immutable_get([pk]).get(pk) if immutable else self._get(pk)
        if head is None:
            return None
        part_count = int(head.get("parts", {}).get("N", "0"))
        if part_count == 0:
            data = str(head["doc"]["S"]).encode()
        else:
            keys = [f"{pk}#p{i}" for i in range(part_count)]
            got = self._immutable_get(keys)  # parts are written once, under a fresh head's checksum
            missing = [key for key in keys if key not in got]
            if missing:
                raise PlanStoreError(f"{pk}: {len(missing)} of {part_count} parts missing", key=pk)
            data = b"".join(bytes(got[key]["data"]["B"]) for key in keys)
        if _sha(data) != head["sha256"]["S"]:
            raise PlanStoreError(f"{pk}: checksum mismatch (corrupt or mixed parts)", key=pk)
        return data.decode()

    def _read_docs(self, keys: list[str]) -> dict[str, str]:
        """Immutable documents (a version's deployments): :meth:`_immutable_get`."""
        heads = self._immutable_get(keys)
        return {key: doc for key, head in heads.items() if (doc := self._read_doc(key, head)) is not None}

    # -- readers ----------------------------------------------------------------------------------
    def current(self) -> Manifest | None:
        """The manifest the pointer names (one consistent read), or None before the first publish."""
        item = self._get(POINTER)
        return Manifest.model_validate_json(item["doc"]["S"]) if item else None

    def current_hinted(self) -> Manifest | None:
        """The manifest the pointer names, for a reader that polls it (the module doc, "Readers that
        poll"): one eventually consistent read of this reader's hint (half a read unit), and a
        consistent read of the pointer only when the hint does not settle it.

        The hint settles it when its checksum is the document this reader holds, or one it held
        before and saw replaced (a replica behind: no change); when it carries a document of a
        version newer than the one held, or of the same version with an earlier activation (every
        pointer write moves one of them forward: publish raises the version, ``set_activation`` only
        moves ``activate_at`` earlier), that document is taken (the pointer held it, perhaps a
        moment ago; the first one a reader reads is taken as it is); one that is older is a replica
        behind and is ignored. Anything else (a pending or missing hint, the same version and
        activation in another document) reads the pointer itself, consistently.
        So what a reader holds never goes back, and it is at most the replicas' lag (well under a
        second on DynamoDB) behind what a consistent poll would hold: the activation notice (3 s)
        covers a 1 s poll plus that lag."""
        hint = self._get(hint_key(self._hint_shard), consistent=False)
        seen = self._seen
        if hint is not None:
            sha = str(hint["sha256"]["S"])
            if seen is not None and (sha == seen[0] or sha in self._replaced):
                return seen[1]
            if "doc" in hint and _sha(str(hint["doc"]["S"]).encode()) == sha:
                manifest = Manifest.model_validate_json(hint["doc"]["S"])
                order = 1 if seen is None else _pointer_order(manifest, seen[1])
                if order > 0:
                    self._hold(sha, manifest)
                    return manifest
                if order < 0 and seen is not None:
                    self._replaced.append(sha)
                    return seen[1]
        item = self._get(POINTER)
        if item is None:
            self._seen = None
            return None
        doc = str(item["doc"]["S"])
        manifest = Manifest.model_validate_json(doc)
        self._hold(_sha(doc.encode()), manifest)
        return manifest

    def _hold(self, sha: str, manifest: Manifest) -> None:
        """Hold ``manifest`` (checksum ``sha``) as the pointer; the document held before is replaced."""
        if self._seen is not None and self._seen[0] != sha:
            self._replaced.append(self._seen[0])
        self._seen = (sha, manifest)

    def _hints_pending(self, doc: str) -> None:
        """Before a pointer write: every hint says the pointer may be changing to ``doc`` (its
        checksum only). A failure raises before the pointer is written."""
        sha = _sha(doc.encode())
        items = [{"pk": {"S": hint_key(i)}, "sha256": {"S": sha}} for i in range(HINTS)]
        puts = [{"PutRequest": {"Item": item}} for item in items]
        left: dict[str, Any] = {self._table: puts}
        for attempt in range(8):
            try:
                left = self._ddb.batch_write_item(RequestItems=left).get("UnprocessedItems") or {}
            except AWS_ERRORS as exc:
                raise PlanStoreError(f"cannot write the plan pointer's hints: {exc}", key=POINTER) from exc
            if not left:
                return
            time.sleep(0.02 * 2**attempt)
        raise PlanStoreError("DynamoDB left plan pointer hints unwritten after 8 tries", key=POINTER)

    def _hints_settle(self, doc: str) -> None:
        """After the pointer was written with ``doc``: each hint still pending on it carries it
        (a small document only; best effort: a pending hint sends readers to the pointer)."""
        if len(doc.encode()) > HINT_DOC_BYTES:
            return
        sha = _sha(doc.encode())

        def settle(shard: int) -> None:
            try:
                self._ddb.put_item(
                    TableName=self._table,
                    Item={"pk": {"S": hint_key(shard)}, "sha256": {"S": sha}, "doc": {"S": doc}},
                    ConditionExpression="sha256 = :s",
                    ExpressionAttributeValues={":s": {"S": sha}},
                )
            except AWS_ERRORS:
                pass  # another writer's pending hint (it wins), or unreachable: readers read the pointer

        with ThreadPoolExecutor(max_workers=_WRITERS) as pool:
            list(pool.map(settle, range(HINTS)))

    def manifest(self, version: int) -> Manifest | None:
        doc = self._read_doc(_vkey(version, "manifest"))
        return Manifest.model_validate_json(doc) if doc else None

    def deployment(self, version: int, app: str) -> Deployment | None:
        """The app's deployment in ``version`` (immutable: an eventually consistent read, and a
        consistent one only when it does not find it)."""
        doc = self._read_doc(_vkey(version, "app", app), immutable=True)
        return Deployment.model_validate_json(doc) if doc else None

    def deployments(self, version: int, apps: Iterable[str] | None = None) -> dict[str, Deployment]:
        """Every app's deployment in ``version`` (or those of ``apps``)."""
        if apps is None:
            # the apps of the version's manifest: its activation fields may be rewritten, its apps
            # never, so any replica's copy names them (read as an immutable item)
            doc = self._read_doc(_vkey(version, "manifest"), immutable=True)
            if doc is None:
                return {}
            apps = Manifest.model_validate_json(doc).apps
        names = sorted(apps)
        docs = self._read_docs([_vkey(version, "app", app) for app in names])
        return {
            app: Deployment.model_validate_json(docs[key])
            for app in names
            if (key := _vkey(version, "app", app)) in docs
        }

    def fleet(self, version: int) -> FleetPlan | None:
        """The version's fleet plan (immutable: read as :meth:`deployment`)."""
        doc = self._read_doc(_vkey(version, "fleet"), immutable=True)
        return _load_fleet(doc) if doc else None

    def versions(self) -> list[int]:
        """Every version that has a manifest (published, superseded or orphaned), ascending."""
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "ProjectionExpression": "pk",
            "FilterExpression": "begins_with(pk, :p)",
            "ExpressionAttributeValues": {":p": {"S": _PREFIX}},
        }
        out: list[int] = []
        try:
            while True:
                page = self._ddb.scan(**kwargs)
                for item in page.get("Items", []):
                    pk = item["pk"]["S"]
                    if pk.endswith("#manifest"):
                        out.append(int(pk[len(_PREFIX) :].split("#", 1)[0]))
                if "LastEvaluatedKey" not in page:
                    return sorted(out)
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        except AWS_ERRORS as exc:
            raise PlanStoreError(f"cannot list plan versions: {exc}") from exc

    # -- the writer ---------------------------------------------------------------------------------
    def reserve_version(self) -> int:
        """A fresh version number (atomic counter): queue names can carry it before publishing."""
        try:
            out = self._ddb.update_item(
                TableName=self._table,
                Key={"pk": {"S": SEQUENCE}},
                UpdateExpression="ADD seq :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
                ReturnValues="UPDATED_NEW",
            )
        except AWS_ERRORS as exc:
            raise PlanStoreError(f"cannot reserve a plan version: {exc}", key=SEQUENCE) from exc
        return int(out["Attributes"]["seq"]["N"])

    def publish(
        self,
        deployments: Mapping[str, Deployment] | Iterable[Deployment],
        fleet: FleetPlan,
        *,
        expected: int | None,
        activate_at: float,
        reason: str,
        version: int | None = None,
        created_at: float | None = None,
        app_meta: Mapping[str, Mapping[str, Any]] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Manifest:
        """Write a new version and flip the pointer to it, if the pointer still names ``expected``
        (None: no version yet). Every Deployment is stamped with the version. The new version's
        ``previous`` is the version the front serves at ``created_at``: ``expected`` once it has
        activated, else ``expected``'s own ``previous`` (a version superseded before it activated is
        never served). Raises :class:`VersionConflictError` when another writer flipped first; this
        version's items are then deleted (best effort; GC removes what is left)."""
        current = self.current()
        actual = current.version if current else None
        if actual != expected:
            raise VersionConflictError(expected, actual)
        created = time.time() if created_at is None else created_at
        previous = current.serving(created) if current is not None else None
        number = version if version is not None else self.reserve_version()
        deps = list(deployments.values()) if isinstance(deployments, Mapping) else list(deployments)
        meta = app_meta or {}
        items: list[dict[str, Any]] = []
        apps: dict[str, AppEntry] = {}
        for deployment in deps:
            doc = deployment.model_copy(update={"version": number}).model_dump_json()
            entry_fields = dict(meta.get(deployment.app, {}))
            apps[deployment.app] = AppEntry(
                sha256=_sha(doc.encode()), frame_rate=deployment.frame_rate, **entry_fields
            )
            items += self._doc_items(_vkey(number, "app", deployment.app), doc)
        fleet_doc = fleet.model_dump_json()
        items += self._doc_items(_vkey(number, "fleet"), fleet_doc)
        manifest = Manifest(
            version=number,
            created_at=created,
            activate_at=activate_at,
            reason=reason,
            previous=previous,
            apps=apps,
            counts=dict(sorted(fleet.counts().items())),
            billed_per_hour=float(fleet.billed_per_hour),
            occupancy_per_hour=float(fleet.occupancy_per_hour),
            fleet_sha256=_sha(fleet_doc.encode()),
            **dict(extra or {}),
        )
        manifest_doc = manifest.model_dump_json()
        with ThreadPoolExecutor(max_workers=_WRITERS) as pool:
            list(pool.map(self._put_new, items))
        for item in self._doc_items(_vkey(number, "manifest"), manifest_doc):  # last: marks it complete
            self._put_new(item)
        self._flip(number, expected, manifest_doc)
        return manifest

    def _flip(self, version: int, expected: int | None, manifest_doc: str) -> None:
        cond: dict[str, Any] = (
            {"ConditionExpression": "attribute_not_exists(pk)"}
            if expected is None
            else {
                "ConditionExpression": "version = :e",
                "ExpressionAttributeValues": {":e": {"N": str(expected)}},
            }
        )
        self._hints_pending(manifest_doc)
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item={"pk": {"S": POINTER}, "version": {"N": str(version)}, "doc": {"S": manifest_doc}},
                **cond,
            )
        except AWS_ERRORS as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise PlanStoreError(f"cannot flip the plan pointer: {exc}", key=POINTER) from exc
            now = self.current()
            try:
                self.delete_version(version)
            except PlanStoreError:
                pass  # GC removes the orphan later
            raise VersionConflictError(expected, now.version if now else None) from exc
        self._hints_settle(manifest_doc)

    def set_activation(self, expected: Manifest, activate_at: float, **fields: Any) -> Manifest:
        """Rewrite the current version's activation: ``activate_at`` (never later than the one
        read) and the activation record (``activation``, ``ready_at``, ``unready``). Conditional on
        the pointer still holding exactly the manifest ``expected`` (same version, same activation):
        :class:`VersionConflictError` when another version was published or another check rewrote it
        first. Only the pointer's manifest and the version's manifest item change; the version's
        deployments and fleet (what readers dispatch on) do not, so the flip stays atomic."""
        if activate_at > expected.activate_at:
            raise PlanStoreError(
                f"v{expected.version}: activation can only move earlier "
                f"({activate_at:.3f} > {expected.activate_at:.3f})",
                key=POINTER,
            )
        item = self._get(POINTER)
        actual = int(item["version"]["N"]) if item is not None else None
        if item is None or actual != expected.version:
            raise VersionConflictError(expected.version, actual)
        raw = str(item["doc"]["S"])
        if Manifest.model_validate_json(raw) != expected:
            raise VersionConflictError(expected.version, expected.version)  # another check rewrote it
        updated = expected.model_copy(update={"activate_at": activate_at, **fields})
        doc = updated.model_dump_json()
        self._hints_pending(doc)
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item={"pk": {"S": POINTER}, "version": {"N": str(expected.version)}, "doc": {"S": doc}},
                ConditionExpression="version = :v AND doc = :d",
                ExpressionAttributeValues={":v": {"N": str(expected.version)}, ":d": {"S": raw}},
            )
        except AWS_ERRORS as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise PlanStoreError(f"cannot rewrite the plan pointer: {exc}", key=POINTER) from exc
            now = self.current()
            raise VersionConflictError(expected.version, now.version if now else None) from exc
        self._hints_settle(doc)
        self._rewrite_manifest_item(expected.version, doc)
        return updated

    def _rewrite_manifest_item(self, version: int, doc: str) -> None:
        """The version's manifest item follows the pointer's activation (reports read it), best
        effort: the pointer is what the front and the instances act on."""
        pk = _vkey(version, "manifest")
        try:
            head = self._get(pk)
        except PlanStoreError:  # unreadable now: the pointer, already rewritten, holds the truth
            return
        if head is None or int(head.get("parts", {}).get("N", "0")) or len(doc.encode()) > INLINE_LIMIT:
            return  # gone (GC) or chunked: the pointer alone carries the activation
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item={
                    "pk": {"S": pk},
                    "doc": {"S": doc},
                    "sha256": {"S": _sha(doc.encode())},
                    "parts": {"N": "0"},
                },
                ConditionExpression="sha256 = :old",
                ExpressionAttributeValues={":old": head["sha256"]},
            )
        except AWS_ERRORS:
            pass  # a concurrent rewrite or GC won, or DynamoDB was unreachable; the pointer holds the truth

    def delete_version(self, version: int) -> None:
        """Delete every item of ``version`` (manifest first, so it stops being listed). Refuses the
        version the pointer names."""
        current = self.current()
        if current is not None and current.version == version:
            raise PlanStoreError(f"version {version} is current; it cannot be deleted", key=POINTER)
        head_keys = [_vkey(version, "manifest"), _vkey(version, "fleet")]
        manifest = self.manifest(version)
        fleet = None
        try:
            fleet = self.fleet(version)
        except PlanStoreError:
            fleet = None  # corrupt or half-written: delete what the keys below reach
        apps = list(manifest.apps) if manifest else []
        heads = self._batch_get(head_keys + [_vkey(version, "app", app) for app in apps])
        keys: list[str] = []
        for pk, head in heads.items():
            keys += [f"{pk}#p{i}" for i in range(int(head.get("parts", {}).get("N", "0")))]
        if fleet is not None:
            keys += [_vkey(version, "claim", str(instance.slot)) for instance in fleet.instances]
        keys += [key for key in heads if not key.endswith("#manifest")]
        self._delete([_vkey(version, "manifest")])
        self._delete(keys)

    # -- slot claims --------------------------------------------------------------------------------
    def claims(
        self, version: int, fleet: FleetPlan | None = None, consistent: bool = True
    ) -> dict[str, Claim]:
        """Slot -> its claim, for every claimed slot of ``version``. ``consistent=False``: an
        eventually consistent read (half the read units), for a periodic check that may see a
        claim a moment late (the backlog and activation checks)."""
        fl = fleet if fleet is not None else self.fleet(version)
        if fl is None:
            return {}
        got = self._batch_get(
            [_vkey(version, "claim", str(instance.slot)) for instance in fl.instances], consistent=consistent
        )
        return {
            claim.slot: claim
            for claim in (Claim.model_validate_json(item["doc"]["S"]) for item in got.values())
        }

    def claim(
        self, version: int, instance_id: str, hardware: str, prefer_slot: str | None = None
    ) -> Instance | None:
        """Claim a free slot of ``hardware`` in ``version`` for ``instance_id`` (conditional write:
        two instances never hold one slot). Idempotent: an instance that already holds a slot gets
        it back. Preference, first to last: a free slot whose content equals what ``prefer_slot``
        held in the previous version (nothing to reload; ``prefer_slot`` itself first), the slot
        named ``prefer_slot``, the slot sharing most models with it, then slot order. None when
        every slot of ``hardware`` is taken."""
        fleet = self.fleet(version)
        if fleet is None:
            raise PlanStoreError(f"plan version {version} has no fleet", key=_vkey(version, "fleet"))
        held = self.claims(version, fleet)
        for inst in fleet.instances:
            held_claim = held.get(str(inst.slot))
            if held_claim is not None and held_claim.instance_id == instance_id:
                return inst
        free = [
            candidate
            for candidate in fleet.instances
            if candidate.hardware == hardware and str(candidate.slot) not in held
        ]
        for inst in self._preference(version, free, prefer_slot):
            claim = Claim(slot=str(inst.slot), instance_id=instance_id, hardware=hardware, at=time.time())
            try:
                self._ddb.put_item(
                    TableName=self._table,
                    Item={
                        "pk": {"S": _vkey(version, "claim", claim.slot)},
                        "doc": {"S": claim.model_dump_json()},
                        "holder": {"S": instance_id},
                    },
                    ConditionExpression="attribute_not_exists(pk)",
                )
            except AWS_ERRORS as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    continue  # another instance won this slot: try the next
                raise PlanStoreError(f"cannot claim slot {claim.slot}: {exc}") from exc
            return inst
        return None

    def _preference(self, version: int, free: list[Instance], prefer_slot: str | None) -> list[Instance]:
        if prefer_slot is None or not free:
            return free
        before: tuple[tuple[Any, ...], ...] = ()
        manifest = self.manifest(version)
        if manifest is not None and manifest.previous is not None:
            prev = self.fleet(manifest.previous)
            old = (
                next((instance for instance in prev.instances if str(instance.slot) == prefer_slot), None)
                if prev
                else None
            )
            before = slot_content(old) if old is not None else ()
        models = {key[:2] for key in before}

        def rank(inst: Instance) -> tuple[int, int, int]:
            same = bool(before) and slot_content(inst) == before
            named = str(inst.slot) == prefer_slot
            common = len(models & {key[:2] for key in slot_content(inst)})
            return (0 if same else 1, 0 if named else 1, -common)

        return sorted(free, key=rank)  # stable: slot order breaks ties

    def release(self, version: int, instance_id: str) -> list[str]:
        """Drop every claim ``instance_id`` holds in ``version`` (when it leaves); returns the slots."""
        out: list[str] = []
        for slot, claim in self.claims(version).items():
            if claim.instance_id != instance_id:
                continue
            try:
                self._ddb.delete_item(
                    TableName=self._table,
                    Key={"pk": {"S": _vkey(version, "claim", slot)}},
                    ConditionExpression="holder = :me",
                    ExpressionAttributeValues={":me": {"S": instance_id}},
                )
            except AWS_ERRORS as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    continue  # someone else holds it now
                raise PlanStoreError(f"cannot release slot {slot}: {exc}") from exc
            out.append(slot)
        return out

    # -- instance heartbeats ------------------------------------------------------------------------
    def put_instance(self, status: InstanceStatus) -> None:
        pk = f"instance#{status.instance_id}"
        try:
            self._ddb.put_item(
                TableName=self._table, Item={"pk": {"S": pk}, "doc": {"S": status.model_dump_json()}}
            )
        except AWS_ERRORS as exc:
            raise PlanStoreError(f"cannot write {pk}: {exc}", key=pk) from exc

    def instances(self) -> dict[str, InstanceStatus]:
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "FilterExpression": "begins_with(pk, :p)",
            "ExpressionAttributeValues": {":p": {"S": "instance#"}},
        }
        out: dict[str, InstanceStatus] = {}
        try:
            while True:
                page = self._ddb.scan(**kwargs)
                for item in page.get("Items", []):
                    st = InstanceStatus.model_validate_json(item["doc"]["S"])
                    out[st.instance_id] = st
                if "LastEvaluatedKey" not in page:
                    return out
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        except AWS_ERRORS as exc:
            raise PlanStoreError(f"cannot list instances: {exc}") from exc

    def delete_instance(self, instance_id: str) -> None:
        self._delete([f"instance#{instance_id}"])
