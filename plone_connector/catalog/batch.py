"""One batch of catalog changes per ZODB transaction, sent through a transaction data manager.

The batch collects the entries the indexing queue produces. It is staged in the service while the
ZODB storages store, and the data manager's ``commit`` waits for that before any storage votes (a
failure fails the commit, so ZODB commits nothing and the user sees the error; no staging runs
under a storage's commit lock); after ``tpc_finish`` of the ZODB storages it is
committed, before the commit returns; on abort it is discarded. Its id goes into
``transaction.extension["catalog_batch_ids"]`` as soon as the transaction has catalog changes, so a
storage that records it lets the service resolve a batch a crash left staged.

A query in the transaction stages the batch first, so that it sees the transaction's changes. After
the first staging, only the entries changed since are sent, appended to the staged batch (each
replaces the staged entry of its uid): a transaction that queries once per object it changes, as
moving a folder does, sends each change about once instead of its whole batch before every query.
The whole batch is staged again where an append cannot say what changed (a clear, a savepoint
rollback that removed entries, a failed request).

The staging goes through the client's background thread (one per process), and every other
request of the process waits for that thread's requests first (``client.settle``), so requests
reach the service in the order this process's transactions made them.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import uuid as uuidlib
from concurrent.futures import Future

import transaction as transaction_module
from Acquisition import aq_base, aq_inner, aq_parent
from transaction.interfaces import ISavepointDataManager
from zope.interface import implementer

from catalog_schemas.api import Batch, BatchAppend, IndexDeclaration, SchemaUpdate

from . import client as client_module
from .committed import batch_watch
from .errors import CatalogServiceError, ServiceRejected, ServiceUnavailable, StreamedBatchRollback
from .outcomes import fresh_object

logger = logging.getLogger("plone_connector.catalog")

EXTENSION_KEY = "catalog_batch_ids"

# Commits that failed after ZODB committed (service briefly down at tpc_finish): retried before the
# next query of this process; the service's staged-batch resolution is the backstop.
_unfinished: list[tuple[str, str]] = []
_unfinished_lock = threading.Lock()
# Their batches (by id), to apply again if a resolver aborted one meanwhile (_apply_again).
_unfinished_batches: dict[str, Batch] = {}
# Schema changes whose sending failed after ZODB committed them: catalog id -> (index names,
# column names) removed. Sent again (retry_unfinished) from the tool's declarations then.
_unsent_schemas: dict[str, _UnsentSchema] = {}


def _commit(client, catalog_id: str, batch_id: str, batch: PendingBatch | None = None) -> None:
    streamed = batch is not None and batch.streamed
    try:
        if streamed:
            # Applied whole by the service (a rebuild's indexes built again): more than a query's time.
            client.commit_batch(catalog_id, batch_id, timeout=client.settings.bulk_timeout)
        else:
            client.commit_batch(catalog_id, batch_id)
    except ServiceRejected as exc:
        if exc.status == 409 and streamed:
            logger.error("catalog batch %s, sent ahead in chunks, was aborted by a resolver after ZODB committed "
                         "its transaction, and only the service had its entries: rebuild the catalog "
                         "(clearFindAndRebuild) or run verify --repair", batch_id)
            return
        if exc.status == 409 and batch is not None:
            _apply_again(client, catalog_id, batch_id, batch.to_model())
            return
        logger.exception("commit of catalog batch %s failed; will retry", batch_id)
        _keep_unfinished(catalog_id, batch_id, batch)
    except Exception:
        # ZODB has committed; the batch must follow. Keep it for a later retry.
        logger.exception("commit of catalog batch %s failed; will retry", batch_id)
        _keep_unfinished(catalog_id, batch_id, batch)


def _keep_unfinished(catalog_id: str, batch_id: str, batch: PendingBatch | None) -> None:
    # A copy of the batch (the transaction's abort after its commit empties it): a resolver may
    # abort the staged batch before the retry commits it, which then applies it again.
    # (Not a batch sent ahead in chunks: the service alone holds most of its entries.)
    model = batch.to_model() if batch is not None and not batch.streamed else None
    with _unfinished_lock:
        _unfinished.append((catalog_id, batch_id))
        if model is not None:
            _unfinished_batches[batch_id] = model


def _apply_again(client, catalog_id: str, batch_id: str, batch: Batch) -> None:
    """ZODB committed the transaction, but its staged batch was aborted meanwhile: a resolver took
    it for one a crash had left (its commit came more than the resolve delay after its staging,
    decisions/0011). Apply its entries again under a new id; their versions keep newer changes, and
    so does the batch's version a clear (it removes only what is older than this transaction's
    snapshot, not what others committed in between)."""
    model = Batch.model_validate({**batch.model_dump(), "batch_id": uuidlib.uuid4().hex})
    try:
        client.apply_batch(catalog_id, model)
    except CatalogServiceError:
        logger.exception("catalog batch %s was aborted and could not be applied again: run verify --repair",
                         batch_id)
        return
    logger.warning("catalog batch %s was aborted by a resolver after ZODB committed; applied again as %s",
                   batch_id, model.batch_id)
    # The catalog counter's mark in ZODB names the aborted id, which the service never reports
    # committed: without this, every query of this process would wait for it in vain (about a
    # second, again every GIVE_UP_SECONDS) and not be cached until the next catalog change.
    batch_watch.committed(batch_id)


class PendingBatch:
    """The catalog changes of one transaction, keyed by catalog uid (the last change wins)."""

    def __init__(self, catalog_id: str, version: int):
        self.catalog_id = catalog_id
        self.batch_id = uuidlib.uuid4().hex
        # The value this transaction writes into the tool's uid claims: its own (random, not 0).
        self.token = random.getrandbits(31) or 1
        self.counted = False  # this transaction counted in the tool's claim count
        self.version = version
        self.entries: dict[str, dict] = {}
        self.clear = False
        # True once the service holds a staged copy; dirty when the copy is out of date.
        self.staged = False
        self.dirty = False
        # What the staged copy holds (entries by uid, and its clear), or None where that is not
        # known (nothing staged yet, a staging failed): the next staging sends the whole batch.
        self._copy: dict[str, dict] | None = None
        self._copy_clear = False
        # Uids whose entries may differ from the staged copy's.
        self._changed: set[str] = set()
        # A large batch is sent ahead in chunks (``release``): the uids whose entries only the
        # staged copy holds now, each with its kind ("f" full, "p" partial, "u" unindex); the
        # paths above their paths (``mentions``); how many chunks went ahead.
        self.flushed: dict[str, str] = {}
        self._flushed_above: set[str] = set()
        self._flushed_digests = False
        self.chunks = 0

    def __bool__(self) -> bool:
        return bool(self.entries) or self.clear or bool(self.flushed)

    @property
    def streamed(self) -> bool:
        """Whether the staged copy holds entries this batch no longer has (sent ahead in chunks)."""
        return bool(self.flushed)

    def release(self) -> int:
        """Drop the entries the staged copy holds (it is up to date: nothing changed since the
        staging landed), keeping only their uids and kinds: a rebuild's memory stays bounded by
        the chunk, not the site. Returns the number released."""
        if self._changed or self.dirty or self._copy is None:
            return 0  # the staged copy is not known to hold them all
        for uid, entry in self.entries.items():
            kind = "u" if entry["op"] == "unindex" else "p" if "idxs" in entry else "f"
            self.flushed[uid] = kind
            path = entry.get("path") or uid
            if path.startswith("sha256:") or not path.startswith("/"):
                self._flushed_digests = True
                continue
            parent = path.rpartition("/")[0]
            while parent and parent not in self._flushed_above:
                self._flushed_above.add(parent)
                parent = parent.rpartition("/")[0]
        released = len(self.entries)
        self.entries = {}
        self._copy = {}
        self.chunks += 1
        return released

    def mentions(self, path: str) -> bool:
        """Whether the batch has an entry at or under ``path`` (a digested uid: maybe)."""
        if self._flushed_digests or path in self.flushed or path in self._flushed_above:
            return True
        prefix = path + "/"
        for entry in self.entries.values():
            entry_path = entry.get("path") or entry["uid"]
            if entry_path.startswith("sha256:") or entry_path == path or entry_path.startswith(prefix):
                return True
        return False

    def index(self, uid: str, path: str, values: dict, metadata: dict | None, idxs: list[str] | None):
        previous = self.entries.get(uid)
        if idxs is None or previous is None or previous["op"] != "index":
            entry = {"op": "index", "uid": uid, "path": path, "values": values, "version": self.version}
            entry["metadata"] = metadata if metadata is not None else {}
            if idxs is not None:
                entry["idxs"] = list(idxs)
            self.entries[uid] = entry
        else:
            # Partial reindex on top of an earlier change in this transaction: merge into it.
            previous["path"] = path
            for name in idxs:
                if name in values:
                    previous["values"][name] = values[name]
                else:
                    previous["values"].pop(name, None)
            if "idxs" in previous:
                previous["idxs"] = sorted(set(previous["idxs"]) | set(idxs))
            if metadata is not None:
                previous["metadata"].update(metadata)
        self._changed.add(uid)
        self.dirty = True

    def unindex(self, uid: str):
        self.entries[uid] = {"op": "unindex", "uid": uid, "version": self.version}
        self._changed.add(uid)
        self.dirty = True

    def clear_all(self):
        self._changed.update(self.entries)  # gone from the batch: the next staging sends it whole
        self.entries.clear()
        # What was sent ahead goes too: the whole staging of the clear replaces the staged copy.
        self.flushed.clear()
        self._flushed_above.clear()
        self._flushed_digests = False
        self.clear = True
        self.dirty = True

    def to_model(self) -> Batch:
        return Batch.model_validate({"batch_id": self.batch_id, "entries": list(self.entries.values()),
                                     "clear": self.clear, "version": self.version})

    def snapshot(self):
        return (
            {uid: _copy_entry(e) for uid, e in self.entries.items()},
            self.clear,
            self.chunks,
        )

    def restore(self, state):
        entries, clear, chunks = state
        if self.streamed and (chunks != self.chunks or any(uid not in entries for uid in self._copy or ())):
            # The staged copy holds entries sent ahead since the savepoint, and an append cannot
            # take an entry back; the batch can no longer be what the rollback asks, so the
            # transaction fails (rolling back the ZODB changes alone would leave their entries).
            raise StreamedBatchRollback(
                f"catalog batch {self.batch_id} sent entries to the service ahead (in chunks) since "
                f"this savepoint, which a rollback cannot take back")
        self._changed.update(self.entries)
        self._changed.update(self._copy or ())
        self.entries = {uid: _copy_entry(e) for uid, e in entries.items()}
        self._changed.update(self.entries)
        self.clear = clear
        self.dirty = True

    def staging(self) -> Staging:
        """What to send to make the staged copy this batch: the entries changed since the last
        staging, or the whole batch where an append cannot say it (nothing staged yet, a clear
        since, an entry gone by a savepoint rollback or a clear)."""
        changed, self._changed = self._changed, set()
        copy = self._copy
        if copy is not None and self.clear == self._copy_clear and all(
                uid in self.entries for uid in changed if uid in copy):
            entries = self.entries
            return Staging(self, {uid: _copy_entry(entries[uid]) for uid in sorted(changed)
                                  if uid in entries and copy.get(uid) != entries[uid]}, whole=False)
        if self.streamed:
            raise StreamedBatchRollback(  # (restore and failed() keep this from happening)
                f"catalog batch {self.batch_id} sent entries ahead that it cannot stage whole again")
        return Staging(self, {uid: _copy_entry(e) for uid, e in self.entries.items()}, whole=True)

    def _forget_copy(self) -> None:
        self._copy = None
        self._changed.clear()
        self.flushed.clear()
        self._flushed_above.clear()
        self._flushed_digests = False


class Staging:
    """One staging request of a batch: the whole batch, or the entries to append. The batch learns
    what the staged copy holds once the request has succeeded (``landed``)."""

    def __init__(self, batch: PendingBatch, entries: dict[str, dict], whole: bool):
        self.batch = batch
        self.entries = entries
        self.whole = whole
        self.clear = batch.clear

    def __bool__(self) -> bool:
        return self.whole or bool(self.entries)

    def send(self, client, leave_out: frozenset[str] = frozenset()) -> None:
        """``leave_out``: indexes whose values are not sent (see BatchDataManager._unconverted)."""
        batch = self.batch
        entries = list(self.entries.values())
        if leave_out:
            entries = [_without_values(entry, leave_out) for entry in entries]
        if self.whole:
            client.stage_batch(batch.catalog_id, Batch.model_validate(
                {"batch_id": batch.batch_id, "entries": entries, "clear": self.clear,
                 "version": batch.version}))
        else:
            client.append_batch(batch.catalog_id, batch.batch_id,
                                BatchAppend.model_validate({"entries": entries}))

    def landed(self) -> None:
        batch = self.batch
        batch.staged = True
        if self.whole:
            batch._copy, batch._copy_clear = self.entries, self.clear
        elif batch._copy is not None:
            batch._copy.update(self.entries)

    def failed(self) -> None:
        batch = self.batch
        batch.dirty = True
        if batch.streamed and not self.whole:
            # An append is one database transaction (applied or not) and sending it again leaves
            # the same rows: send these entries again rather than the whole batch, which this
            # process no longer has.
            batch._changed.update(self.entries)
            return
        # The service may hold the old copy, the new one or none: send the whole batch next time.
        batch._copy = None


def _without_values(entry: dict, names: frozenset[str]) -> dict:
    if "values" not in entry or not names.intersection(entry["values"]):
        return entry
    return {**entry, "values": {k: v for k, v in entry["values"].items() if k not in names}}


def _copy_entry(entry: dict) -> dict:
    copy = dict(entry)
    if "values" in copy:
        copy["values"] = dict(copy["values"])
        copy["metadata"] = dict(copy["metadata"])
    return copy


@implementer(ISavepointDataManager)
class BatchDataManager:
    def __init__(self, client, batch: PendingBatch, txn):
        self.client = client
        self.batch = batch
        self.transaction_manager = transaction_module.manager
        self._txn = txn
        # Index/column changes of this transaction not sent yet ({"tool", "remove_indexes",
        # "remove_metadata"}). Before ZODB commits, only what they add goes to the service (with
        # ``only_add``), before the batch, so the service knows every index the entries use: an
        # aborted transaction must not have removed an index or dropped its values there. The
        # whole update follows in tpc_finish.
        self.schema_update: dict | None = None
        # The indexes and columns this transaction removed, so far.
        self._schema_removed: tuple[set[str], set[str]] = (set(), set())
        # The indexes it cleared, and the index objects it removed (by name): replaced ones.
        self._schema_cleared: set[str] = set()
        self._schema_removed_objects: dict[str, object] = {}
        # The whole update as of the last sending of the additions, for tpc_finish; and the
        # service's indexes that sending answered (the batch was staged against them).
        self._schema_final: SchemaUpdate | None = None
        self._schema_tool = None  # the catalog tool whose schema that is
        self._service_indexes: dict[str, IndexDeclaration] = {}
        self._service_metadata: frozenset[str] = frozenset()
        # Set when the tool has named this batch beside the catalog counter in ZODB: readers will
        # wait for it, so it is staged and committed even if a savepoint rollback emptied it.
        self.marked = False
        # The staging sent in the background at tpc_begin, until tpc_vote waits for it.
        self._staging: tuple[Staging, Future] | None = None
        # Our vote went through: every storage voted before us (we sort last).
        self._voted = False

    # The ZODB connections finish first: a crash between their finish and ours leaves a staged
    # batch whose transaction committed, which the service resolves; the reverse order could
    # leave catalog entries for a transaction that never committed.
    def sortKey(self):
        return "\uffffplone_connector.catalog:" + self.batch.catalog_id

    def _needs_staging(self) -> bool:
        # An emptied batch is still sent when a staged copy must be replaced or the mark names it.
        return self.batch.dirty and bool(self.batch or self.batch.staged or self.marked)

    def _await_staging(self) -> None:
        pending, self._staging = self._staging, None
        if pending is None:
            return
        staging, future = pending
        try:
            future.result()
        except BaseException:
            staging.failed()  # not staged: send it again if anyone asks
            raise
        staging.landed()

    def stage(self):
        """Bring the staged copy up to date (stage the batch, or append its changes) if it changed."""
        self._await_staging()
        if self.schema_update is not None:
            pending, self.schema_update = self.schema_update, None
            try:
                self._send_additions(pending)
            except BaseException:
                self.schema_update = pending  # sent again by the next staging
                raise
        if self._needs_staging():
            staging = self.batch.staging()
            if staging:
                try:
                    staging.send(self.client, self._unconverted())
                except BaseException:
                    staging.failed()
                    raise
            staging.landed()
        self.batch.dirty = False

    def stream(self) -> None:
        """Send the batch ahead once it holds ``chunk_entries`` entries (stage it, then append),
        and drop what was sent: a rebuild or an import of a large site keeps at most a chunk of
        entries in memory, and the service gets requests it accepts (CATALOG_MAX_BATCH_ENTRIES is
        per request). The batch stays one staged batch, committed at tpc_finish, so other
        transactions see the catalog change at once, as ZCatalog's (docs/decisions/0018)."""
        limit = self.client.settings.chunk_entries
        batch = self.batch
        if not limit or len(batch.entries) < limit:
            return
        self.stage()
        batch.release()

    def _unconverted(self) -> frozenset[str]:
        """Indexes this transaction replaces (removed and added again, cleared) that the service
        still declares the old way until ZODB commits (the additions before the commit may not
        replace an index holding values): their values may not fit the old declaration (a list
        for what was a FieldIndex) and are left out of the staging before the commit. The whole
        batch is staged again after the schema change (tpc_finish: _finish_schema answers that
        the indexes changed)."""
        final = self._schema_final
        if final is None:
            return frozenset()
        declared = {d.name: d for d in final.indexes}
        return frozenset(name for name in final.remove_indexes
                         if name in declared and self._service_indexes.get(name) != declared[name])

    def _send_additions(self, pending: dict) -> None:
        """Send what the transaction's schema changes add (new indexes and columns, the declaration
        of an index that holds no values yet, as a first value types it: schema.py), and keep the
        whole update for tpc_finish."""
        removed_indexes, removed_metadata = self._schema_removed
        removed_indexes.update(pending["remove_indexes"])
        removed_metadata.update(pending["remove_metadata"])
        self._schema_cleared.update(pending.get("cleared", ()))
        for name, obj in pending.get("removed_objects", {}).items():
            self._schema_removed_objects.setdefault(name, obj)
        self._schema_tool = pending["tool"]
        update = self._whole_schema()
        additions = update.model_copy(update={"only_add": True, "remove_indexes": [], "remove_metadata": []})
        info = self.client.update_schema(self.batch.catalog_id, additions)
        self._schema_final = update
        self._service_indexes = {d.name: d for d in info.indexes}
        self._service_metadata = frozenset(info.metadata)

    def _whole_schema(self) -> SchemaUpdate:
        tool = self._schema_tool
        replaced = tool._replaced(self._schema_cleared, self._schema_removed_objects)
        return tool.schema_update(*self._schema_removed, replace_indexes=replaced)

    def replaced_indexes(self) -> set[str]:
        """The indexes whose values in the service this transaction drops (cleared, removed)."""
        names = set(self._schema_removed[0]) | self._schema_cleared
        if self.schema_update is not None:
            names |= self.schema_update["remove_indexes"] | self.schema_update.get("cleared", set())
        return names

    def _finish_schema(self, update: SchemaUpdate) -> bool:
        """ZODB has committed: send the transaction's whole schema update (removals, changed
        declarations). Never raises: a failure is logged and retried before a later query of this
        process (``retry_unfinished``). Returns whether the service's indexes are not the ones
        the batch was staged against (it must be staged again before its commit)."""
        catalog_id = self.batch.catalog_id
        # Sent even when the additions were all of it (a new index, a first value's type): another
        # transaction's additions, from a snapshot without this one's changes, may have declared
        # an index otherwise since (the type of an index that held no committed values yet), and
        # ZODB now has this transaction's declarations. (A no-op for the service otherwise.)
        try:
            info = self.client.update_schema(catalog_id, update)
        except Exception:
            left_out = sorted(self._unconverted())
            logger.exception("the schema change of catalog %s could not be sent after ZODB committed it; "
                             "will retry%s", catalog_id,
                             f" (the batch commits without the values of the replaced indexes {left_out}:"
                             " reindex them, or run verify --repair)" if left_out else "")
            _keep_schema(catalog_id, update, _last_tid(self._schema_tool))
            return False
        declared = {d.name for d in update.indexes}
        if any(name in declared for name in update.remove_indexes):
            return True  # replaced: what the staged copy holds of them was converted before
        return {d.name: d for d in info.indexes} != self._service_indexes

    def _stage_again(self, update: SchemaUpdate) -> None:
        """Stage the whole batch again, converted by the service under the schema this transaction
        committed (the staged copy was converted under the one before: values of a removed index
        it still had, of a changed index in its old form)."""
        batch = self.batch
        if batch.streamed:
            logger.error("catalog batch %s was sent ahead in chunks and cannot be staged again after the schema "
                         "change of its transaction; committed as staged (reindex the changed indexes, or run "
                         "verify --repair)", batch.batch_id)
            _keep_schema(batch.catalog_id, update, _last_tid(self._schema_tool))
            return
        try:
            self.client.stage_batch(batch.catalog_id, batch.to_model())
        except Exception:
            # Committed as it was staged; the removals sent again later drop what it holds of
            # the removed indexes.
            logger.exception("catalog batch %s could not be staged again after the schema change of its "
                             "transaction; committed as staged before (run verify --repair if the changed "
                             "indexes differ)", batch.batch_id)
            _keep_schema(batch.catalog_id, update, _last_tid(self._schema_tool))

    # -- ISavepointDataManager -------------------------------------------------------------

    def savepoint(self):
        return BatchSavepoint(self)

    def abort(self, txn):
        self._discard(txn)

    def tpc_begin(self, txn):
        # Everything this data manager reads from ZODB objects (the tool's schema) is read here,
        # before the ZODB connections' commit(): its final savepoint turns objects of this
        # transaction into ghosts when the transaction touched more than the cache holds, and
        # until the storages finish, loading one gives its state from before this transaction
        # (a POSKeyError for a new one). A schema change read in commit() sent the old columns.
        if self.schema_update is not None:
            self._stage_for_vote()  # the additions first, then the batch, from this thread
        elif self._schema_final is not None:
            # As ZODB will commit it: a savepoint rolled back since the additions were sent may
            # have taken a removal back (schema_update keeps what the tool still has).
            self._schema_final = self._whole_schema()
        # The indexing queue was processed before the commit began: the batch is complete. Stage it
        # while the ZODB storages store and vote (they sort before us); commit() waits for it and
        # sends it again if it changed since.
        if self._needs_staging():
            staging = self.batch.staging()
            self.batch.dirty = False
            if staging:
                # Without the values of the indexes this transaction replaces, as stage() sends
                # them (additions sent by an earlier staging: a query in the transaction).
                self._staging = (staging, client_module.in_background(staging.send, self.client,
                                                                      self._unconverted()))

    def commit(self, txn):
        # The staging is waited for here, after the ZODB storages stored (they sort first) and
        # before any of them votes: JsonbStorage's vote takes the database's commit lock and
        # holds it until tpc_finish, and a large staging (a rebuild's) under it would keep every
        # other writer of the database waiting. Nothing here reads ZODB (see tpc_begin).
        self._stage_for_vote()

    def tpc_vote(self, txn):
        self._stage_for_vote()  # nothing to send unless the batch changed since commit()
        self._voted = True

    def _stage_for_vote(self):
        try:
            self.stage()
        except CatalogServiceError as exc:
            # The same class: the publisher chooses the error page by it (ServiceUnavailable has
            # its own, a 503 that asks to try again).
            if isinstance(exc, ServiceUnavailable):
                reason = "is unavailable"
            else:
                reason = "did not accept this transaction's catalog changes"
            raise type(exc)(
                f"The catalog service {reason}, so nothing was saved: {exc}",
                exc.status,
                exc.detail,
            ) from exc

    def tpc_finish(self, txn):
        batch = self.batch
        _forget(txn, batch.catalog_id)
        # ZODB has committed: the schema change goes first, so that the batch's commit, which the
        # readers of the new catalog counter wait for, brings them both.
        schema, self._schema_final = self._schema_final, None
        stage_again = schema is not None and self._finish_schema(schema)
        if not batch.staged:
            return
        # From here on the batch is never ours to abort (the transaction calls abort() on every
        # resource again after its after-commit hooks ran).
        batch.staged = False
        if stage_again and (batch.entries or batch.streamed):
            self._stage_again(schema)
        # Not in the background: when the commit returns, every later query sees the batch, also
        # one that another program sends to the service (read-your-writes, docs/connector.md).
        _commit(self.client, batch.catalog_id, batch.batch_id, batch)

    def tpc_abort(self, txn):
        if self._voted and self.batch.staged:
            # Aborted after every vote went through: a storage's tpc_finish failed, and it may
            # have committed all the same (JsonbStorage: the outcome of a COMMIT whose connection
            # broke; RelStorage alike; several databases, one of which finished). Aborting the
            # batch would lose the entries of a committed transaction for good; left staged, the
            # resolvers commit or abort it by what was recorded (catalog_txn_outcome, the ZODB
            # batch log), as after a crash at this point.
            logger.warning("catalog batch %s left staged for the resolvers: the commit failed after"
                           " the vote, and may have happened", self.batch.batch_id)
            schema, self._schema_final = self._schema_final, None
            if schema is not None:
                # Sent by the next query's retry as ZODB then has it (its removals only if they
                # were committed: schema_update keeps an index ZODB still has).
                _keep_schema(self.batch.catalog_id, schema, _last_tid(self._schema_tool))
            self._discard(txn, in_service=False)
            return
        self._discard(txn)

    def _discard(self, txn, in_service: bool = True):
        batch = self.batch
        _forget(txn, batch.catalog_id)
        with contextlib.suppress(Exception):
            self._await_staging()  # a staging in flight is aborted below once it has landed
        if batch.staged and in_service:
            try:
                self.client.abort_batch(batch.catalog_id, batch.batch_id)
            except CatalogServiceError:
                # A staged batch nobody commits is dropped by the service after its TTL.
                logger.warning("abort of catalog batch %s failed; the service will expire it", batch.batch_id)
        batch.staged = False
        batch.entries.clear()
        batch.clear = False
        batch._forget_copy()


class BatchSavepoint:
    def __init__(self, manager: BatchDataManager):
        self.manager = manager
        self.state = manager.batch.snapshot()

    def rollback(self):
        self.manager.batch.restore(self.state)


_keys: dict[str, object] = {}


def _key(catalog_id: str) -> object:
    return _keys.setdefault(catalog_id, object())


def _forget(txn, catalog_id: str) -> None:
    with contextlib.suppress(AttributeError, TypeError):
        txn.set_data(_key(catalog_id), None)


def current_manager(client, catalog_id: str, version_of, create: bool) -> BatchDataManager | None:
    """The data manager of the current transaction for this catalog, joined on first use."""
    txn = transaction_module.get()
    key = _key(catalog_id)
    try:
        manager = txn.data(key)
    except KeyError:
        manager = None
    if manager is not None or not create:
        return manager
    batch = PendingBatch(catalog_id, version_of())
    manager = BatchDataManager(client, batch, txn)
    txn.join(manager)
    txn.set_data(key, manager)
    txn.extension.setdefault(EXTENSION_KEY, []).append(batch.batch_id)
    return manager


def retry_unfinished(client, tool=None) -> None:
    """Wait for the batch requests in flight, then commit batches whose commit failed after their
    ZODB transaction committed, and send the schema changes of ``tool``'s catalog that failed then
    (after the batches: sent again, the removals drop what those hold of the removed indexes)."""
    client_module.settle()
    if _unfinished:
        with _unfinished_lock:
            pending = list(_unfinished)
            _unfinished.clear()
        for position, (catalog_id, batch_id) in enumerate(pending):
            try:
                client.commit_batch(catalog_id, batch_id)
            except CatalogServiceError as exc:
                if exc.status is not None and 400 <= exc.status < 500:
                    with _unfinished_lock:
                        model = _unfinished_batches.pop(batch_id, None)
                    if exc.status == 409 and model is not None:
                        # Aborted by a resolver meanwhile, though ZODB committed it: as tpc_finish.
                        _apply_again(client, catalog_id, batch_id, model)
                        continue
                    logger.error("catalog batch %s could not be committed: %s", batch_id, exc)
                    continue
                with _unfinished_lock:
                    _unfinished.extend(pending[position:])  # this one and those not tried yet
                raise
            with _unfinished_lock:
                _unfinished_batches.pop(batch_id, None)
    if tool is not None and _unsent_schemas:
        _retry_schema(client, tool)


class _UnsentSchema:
    """Removals not sent yet, and the ZODB tid a snapshot must have reached to send them: the
    transaction that made them (an older snapshot still has the removed indexes, and the
    declarations of before)."""

    def __init__(self):
        self.indexes: set[str] = set()
        self.metadata: set[str] = set()
        self.after = 0


def _keep_schema(catalog_id: str, update: SchemaUpdate, after: int = 0) -> None:
    with _unfinished_lock:
        unsent = _unsent_schemas.setdefault(catalog_id, _UnsentSchema())
        unsent.indexes.update(update.remove_indexes)
        unsent.metadata.update(update.remove_metadata)
        unsent.after = max(unsent.after, after)


def _last_tid(tool) -> int:
    """The newest tid the tool's ZODB connection knows of (right after a commit: at least that
    commit's), 0 if unknown."""
    jar = getattr(tool, "_p_jar", None)
    storage = getattr(jar, "_normal_storage", None) or getattr(jar, "_storage", None)
    try:
        last = storage.lastTransaction()
    except Exception:  # noqa: BLE001 - only a bound for the retry
        return 0
    return int.from_bytes(last, "big") if last else 0


def _committed_schema(tool, remove_indexes, remove_metadata) -> tuple[int, SchemaUpdate]:
    """The snapshot version and the schema update of ``tool``'s catalog as ZODB has them now: read
    in a fresh snapshot of a connection of its own, not in the current transaction's, which may be
    older than a schema change committed since (a Field index typed by its first value, an index
    added again): a whole update from it would undo that change in the service (replace the typed
    index, dropping its values; remove the index added again)."""
    base = aq_base(tool)
    with fresh_object(base._p_jar.db(), base._p_oid) as fresh:
        fresh = fresh.__of__(aq_parent(aq_inner(tool)))
        return fresh._snapshot_version(), fresh.schema_update(remove_indexes, remove_metadata)


def _retry_schema(client, tool) -> None:
    """Send the schema of ``tool``'s catalog as ZODB has it now (committed, and at least as new as
    the change whose sending failed), with the removals that were not sent."""
    catalog_id = tool.catalog_id()
    with _unfinished_lock:
        unsent = _unsent_schemas.get(catalog_id)
        if unsent is None or tool._snapshot_version() < unsent.after:
            return  # an older snapshot (another thread's transaction): a later query sends them
        del _unsent_schemas[catalog_id]
    removed = SchemaUpdate(remove_indexes=sorted(unsent.indexes), remove_metadata=sorted(unsent.metadata))
    manager = current_manager(client, catalog_id, None, create=False)
    if manager is not None and (manager.schema_update is not None or manager._schema_final is not None):
        # This transaction changes the schema itself (its additions may be in the service, and
        # not in ZODB yet): a later query, in another transaction, sends them.
        _keep_schema(catalog_id, removed, unsent.after)
        return
    try:
        version, update = _committed_schema(tool, unsent.indexes, unsent.metadata)
        if version < unsent.after:  # (ZODB's newest was not read: a later query sends them)
            _keep_schema(catalog_id, removed, unsent.after)
            return
        client.update_schema(catalog_id, update)
    except CatalogServiceError as exc:
        if isinstance(exc, ServiceRejected) or (exc.status is not None and 400 <= exc.status < 500):
            logger.error("the schema change of catalog %s could not be sent: %s", catalog_id, exc)
            return
        _keep_schema(catalog_id, removed, unsent.after)
        raise
    logger.warning("the schema change of catalog %s, not sent when its transaction committed, was sent now",
                   catalog_id)
