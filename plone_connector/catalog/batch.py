"""One batch of catalog changes per ZODB transaction, sent through a transaction data manager.

The batch collects the entries the indexing queue produces. It is staged in the service while the
ZODB storages store and vote, and ``tpc_vote`` waits for that (a failure fails the vote, so ZODB
commits nothing and the user sees the error); after ``tpc_finish`` of the ZODB storages it is
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
import threading
import uuid as uuidlib
from concurrent.futures import Future

import transaction as transaction_module
from transaction.interfaces import ISavepointDataManager
from zope.interface import implementer

from catalog_schemas.api import Batch, BatchAppend

from . import client as client_module
from .committed import batch_watch
from .errors import CatalogServiceError, ServiceRejected, ServiceUnavailable

logger = logging.getLogger("plone_connector.catalog")

EXTENSION_KEY = "catalog_batch_ids"

# Commits that failed after ZODB committed (service briefly down at tpc_finish): retried before the
# next query of this process; the service's staged-batch resolution is the backstop.
_unfinished: list[tuple[str, str]] = []
_unfinished_lock = threading.Lock()


def _commit(client, catalog_id: str, batch_id: str, batch: PendingBatch | None = None) -> None:
    try:
        client.commit_batch(catalog_id, batch_id)
    except ServiceRejected as exc:
        if exc.status == 409 and batch is not None and not batch.clear:
            _apply_again(client, batch)
            return
        logger.exception("commit of catalog batch %s failed; will retry", batch_id)
        with _unfinished_lock:
            _unfinished.append((catalog_id, batch_id))
    except Exception:
        # ZODB has committed; the batch must follow. Keep it for a later retry.
        logger.exception("commit of catalog batch %s failed; will retry", batch_id)
        with _unfinished_lock:
            _unfinished.append((catalog_id, batch_id))


def _apply_again(client, batch: PendingBatch) -> None:
    """ZODB committed the transaction, but its staged batch was aborted meanwhile: a resolver took
    it for one a crash had left (its commit came more than the resolve delay after its staging,
    decisions/0011). Apply its entries again under a new id; their versions keep newer changes.
    Not a clear: applied late, it would wipe what others committed in between."""
    model = Batch.model_validate({**batch.to_model().model_dump(), "batch_id": uuidlib.uuid4().hex})
    try:
        client.apply_batch(batch.catalog_id, model)
    except CatalogServiceError:
        logger.exception("catalog batch %s was aborted and could not be applied again: run verify --repair",
                         batch.batch_id)
        return
    logger.warning("catalog batch %s was aborted by a resolver after ZODB committed; applied again as %s",
                   batch.batch_id, model.batch_id)
    # The catalog counter's mark in ZODB names the aborted id, which the service never reports
    # committed: without this, every query of this process would wait for it in vain (about a
    # second, again every GIVE_UP_SECONDS) and not be cached until the next catalog change.
    batch_watch.committed(batch.batch_id)


class PendingBatch:
    """The catalog changes of one transaction, keyed by catalog uid (the last change wins)."""

    def __init__(self, catalog_id: str, version: int):
        self.catalog_id = catalog_id
        self.batch_id = uuidlib.uuid4().hex
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

    def __bool__(self) -> bool:
        return bool(self.entries) or self.clear

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
        self.clear = True
        self.dirty = True

    def to_model(self) -> Batch:
        return Batch.model_validate(
            {"batch_id": self.batch_id, "entries": list(self.entries.values()), "clear": self.clear}
        )

    def snapshot(self):
        return (
            {uid: _copy_entry(e) for uid, e in self.entries.items()},
            self.clear,
        )

    def restore(self, state):
        entries, clear = state
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
        return Staging(self, {uid: _copy_entry(e) for uid, e in self.entries.items()}, whole=True)

    def _forget_copy(self) -> None:
        self._copy = None
        self._changed.clear()


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

    def send(self, client) -> None:
        batch = self.batch
        if self.whole:
            client.stage_batch(batch.catalog_id, Batch.model_validate(
                {"batch_id": batch.batch_id, "entries": list(self.entries.values()), "clear": self.clear}))
        else:
            client.append_batch(batch.catalog_id, batch.batch_id,
                                BatchAppend.model_validate({"entries": list(self.entries.values())}))

    def landed(self) -> None:
        batch = self.batch
        batch.staged = True
        if self.whole:
            batch._copy, batch._copy_clear = self.entries, self.clear
        elif batch._copy is not None:
            batch._copy.update(self.entries)

    def failed(self) -> None:
        # The service may hold the old copy, the new one or none: send the whole batch next time.
        self.batch._copy = None
        self.batch.dirty = True


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
        # Index/column changes of this transaction ({"tool", "remove_indexes", "remove_metadata"}),
        # sent before the batch so the service knows every index the entries use.
        self.schema_update: dict | None = None
        # Set when the tool has named this batch beside the catalog counter in ZODB: readers will
        # wait for it, so it is staged and committed even if a savepoint rollback emptied it.
        self.marked = False
        # The staging sent in the background at tpc_begin, until tpc_vote waits for it.
        self._staging: tuple[Staging, Future] | None = None

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
            update = pending["tool"].schema_update(pending["remove_indexes"], pending["remove_metadata"])
            self.client.update_schema(self.batch.catalog_id, update)
        if self._needs_staging():
            staging = self.batch.staging()
            if staging:
                try:
                    staging.send(self.client)
                except BaseException:
                    staging.failed()
                    raise
            staging.landed()
        self.batch.dirty = False

    # -- ISavepointDataManager -------------------------------------------------------------

    def savepoint(self):
        return BatchSavepoint(self)

    def abort(self, txn):
        self._discard(txn)

    def tpc_begin(self, txn):
        # The indexing queue was processed before the commit began: the batch is complete. Stage it
        # while the ZODB storages store and vote (they sort before us); tpc_vote waits for it and
        # sends it again if it changed since. A schema change is sent in tpc_vote, from this thread.
        if self.schema_update is None and self._needs_staging():
            staging = self.batch.staging()
            self.batch.dirty = False
            if staging:
                self._staging = (staging, client_module.in_background(staging.send, self.client))

    def commit(self, txn):
        pass

    def tpc_vote(self, txn):
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
        if not batch.staged:
            return
        # ZODB has committed: from here on the batch is never ours to abort (the transaction
        # calls abort() on every resource again after its after-commit hooks ran).
        batch.staged = False
        # Not in the background: when the commit returns, every later query sees the batch, also
        # one that another program sends to the service (read-your-writes, docs/connector.md).
        _commit(self.client, batch.catalog_id, batch.batch_id, batch)

    def tpc_abort(self, txn):
        self._discard(txn)

    def _discard(self, txn):
        batch = self.batch
        _forget(txn, batch.catalog_id)
        with contextlib.suppress(Exception):
            self._await_staging()  # a staging in flight is aborted below once it has landed
        if batch.staged:
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


def retry_unfinished(client) -> None:
    """Wait for the batch requests in flight, then commit batches whose commit failed after their
    ZODB transaction committed."""
    client_module.settle()
    if not _unfinished:
        return
    with _unfinished_lock:
        pending = list(_unfinished)
        _unfinished.clear()
    for catalog_id, batch_id in pending:
        try:
            client.commit_batch(catalog_id, batch_id)
        except CatalogServiceError as exc:
            if exc.status is not None and 400 <= exc.status < 500:
                logger.error("catalog batch %s could not be committed: %s", batch_id, exc)
                continue
            with _unfinished_lock:
                _unfinished.append((catalog_id, batch_id))
            raise
