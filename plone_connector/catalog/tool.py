"""portal_catalog as a client of the catalog service.

The tool keeps Plone's CatalogTool (and so ZCatalog) as its base for everything that describes the
catalog: the index objects in ``_catalog.indexes`` (``Indexes[...]``, ``indexes()``, ``schema()``,
meta types that plone.app.querystring and plone.restapi read), the lexicons and the ZMI. Those
index objects hold no data: every method that would write or read index data is overridden here to
go to the service, so a method left to the base class would silently see an empty catalog. Plone
code that reads an index object's data itself gets the object in a proxy that asks the service
(indexes.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import zlib

import Missing
import transaction
from AccessControl.class_init import InitializeClass
from AccessControl.Permissions import manage_zcatalog_entries as ManageZCatalogEntries
from AccessControl.Permissions import manage_zcatalog_indexes as ManageZCatalogIndexes
from AccessControl.Permissions import search_zcatalog as SearchZCatalog
from AccessControl.SecurityInfo import ClassSecurityInfo
from Acquisition import aq_base, aq_inner, aq_parent
from BTrees.IIBTree import IIBTree
from BTrees.Length import Length
from DateTime import DateTime
from plone.indexer.interfaces import IIndexableObject
from Products.CMFCore.indexing import processQueue
from Products.CMFCore.utils import _getAuthenticatedUser
from Products.CMFPlone.CatalogTool import CatalogTool
from Products.ZCatalog.ZCatalog import CatalogError, ZCatalog
from zope.component import queryMultiAdapter
from zope.interface import implementer
from ZPublisher import zpublish

from catalog_schemas.api import SchemaUpdate, SearchRequest

from . import ordering, outcomes, progress, undo, wire
from .batch import current_manager, retry_unfinished
from .brains import BrainRecord, CatalogBrain, LazyResults
from .cache import query_cache, transaction_memo
from .client import get_client
from .committed import CatalogBatchMark, batch_watch, until_complete
from .errors import ServiceRejected, UnmergedResultsUnsupported
from .extraction import NOT_INDEXED, index_value, metadata_value
from .indexes import definition, definitions, service_index
from .interfaces import IServiceCatalogTool
from .new_objects import created_in_this_transaction
from .schema import KNOWN_VALUE_TYPES, TYPED_INDEXES, declarations, wire_value_type
from .wire import catalog_uid

logger = logging.getLogger("plone_connector.catalog")

# Transaction data key of the rid -> path pairs the transaction's lookups found (getpath).
_RID_PATHS = object()

# A query's b_size up to this is fetched in its first request (Plone's listings ask for 20-100).
WHOLE_BATCH = 100
# Paths per request when a rebuild lists the catalog's entries (the service's b_size limit: 5000).
PATH_PAGE = 5000
# Slots of the uid claims (``ServiceCatalogTool._claim``): two transactions at once that change
# entries of different uids conflict only when the uids share a slot (about n1 * n2 / 2**20).
CLAIM_SLOTS = 1 << 20


def minute(now: DateTime) -> DateTime:
    """``now`` floored to the minute: effectiveRange compares minutes, and equal queries cache."""
    return DateTime(int(now.timeTime()) // 60 * 60)


@implementer(IServiceCatalogTool)
class ServiceCatalogTool(CatalogTool):
    """Plone's catalog tool, with its index data kept in the catalog service."""

    security = ClassSecurityInfo()
    service_catalog_id = None
    # CatalogBatchMark: the batch(es) of the transaction that last bumped the counter.
    _catalog_batches = None
    # Field/Keyword index name -> value type declared in the service, once known (see schema.py).
    _service_value_types = None
    # Uid claims: slot (a hash of the catalog uid) -> a token of the last transaction that
    # changed that uid's entry (see _claim).
    _catalog_claims = None
    # Transactions that claimed (a Length): a clear reads it as current (_hold_claims).
    _catalog_claim_count = None

    # -- where ------------------------------------------------------------------------------

    def catalog_id(self) -> str:
        if self.service_catalog_id:
            return self.service_catalog_id
        return aq_parent(aq_inner(self)).getId()

    def _client(self):
        return get_client()

    def _snapshot_version(self) -> int:
        """A version that orders this transaction's entries after every transaction it has seen."""
        jar = self._p_jar
        if jar is None:
            return 0
        # After a savepoint the connection's _storage is a TmpStore; the snapshot is the normal one's.
        # (`is None`, not `or`: a storage may define __len__ and be falsy, as RelStorage's can.)
        storage = getattr(jar, "_normal_storage", None)
        if storage is None:
            storage = jar._storage
        start = getattr(storage, "_start", None)
        if start:
            return int.from_bytes(start, "big") - 1
        last = storage.lastTransaction()
        return int.from_bytes(last, "big") if last else 0

    def _manager(self, create: bool):
        manager = current_manager(self._client(), self.catalog_id(), self._snapshot_version, create)
        if create:
            # ZODB records each batch id, so batches a crashed process left staged are resolved.
            outcomes.watch(self)
            outcomes.record(self, manager)
        return manager

    def _claim(self, manager, uid: str) -> None:
        """Write the uid's slot in a BTree of the ZODB, so that two transactions at once that both
        change the entry of one uid conflict there (ConflictError, retried by the publisher with a
        fresh snapshot), as they would in ZCatalog's own index BTrees.

        Without it ZODB commits both when they changed different objects (a security reindex of
        a folder's subtree and an edit of a document in it; a reorder and an edit; a deletion
        and a reindex), and the service keeps one entry computed from a snapshot that lacks the
        other's change: a revoked role still finding the document, a stale order, a phantom.
        """
        if undo.following():
            return
        claims = self._catalog_claims
        if claims is None:
            claims = self._catalog_claims = IIBTree()
        slot = zlib.crc32(uid.encode("utf-8", "surrogatepass")) % CLAIM_SLOTS
        batch = manager.batch
        if claims.get(slot) != batch.token:
            claims[slot] = batch.token
        if not (batch.counted or batch.clear):  # once per transaction; a clear reads it (_hold_claims)
            count = self._catalog_claim_count
            if count is None:
                count = self._catalog_claim_count = Length()
            count.change(1)
            batch.counted = True

    def _hold_claims(self) -> None:
        """A clear removes the entries older than its transaction's snapshot (decisions/0016). An
        entry of a new object that another transaction adds at once carries that one's snapshot,
        possibly older, though the clear's snapshot never saw the object, and its uid claim merges
        with the clear's (another key). So every transaction that claims counts itself in a
        Length (merged too), and the clear reads that as current (ZODB's readCurrent): a claim
        committed since its snapshot makes the clear a ReadConflictError, retried from a snapshot
        that has it, as ZCatalog's clear conflicts. (The clear itself does not count: its own
        write would skip the check.)"""
        count = self._catalog_claim_count
        jar = self._p_jar
        if count is not None and jar is not None and count._p_oid is not None:
            count._p_activate()  # a ghost has no serial yet, and readCurrent would skip it
            jar.readCurrent(count)

    def _changing(self):
        """The transaction's batch manager; bumps the counter and marks the batch beside it."""
        manager = self._manager(create=True)
        self._increment_counter()
        _forget_rid_paths()  # a change can drop or move entries whose rids were looked up
        mark = self._catalog_batches
        if mark is None:
            mark = self._catalog_batches = CatalogBatchMark()
        mark.record(manager.batch.batch_id)
        # The mark names this batch now, so it must reach the service even if it ends up empty.
        manager.marked = True
        return manager

    # -- writing ----------------------------------------------------------------------------

    def _extract(self, wrapper, idxs=None, update_metadata=1) -> tuple[dict, dict | None]:
        """Index values and metadata of an (indexable) object, in wire form."""
        catalog = self._catalog
        names = list(idxs) if idxs else list(catalog.indexes.keys())
        values = {}
        for name in names:
            value = index_value(definition(catalog, name), wrapper)
            if value is not NOT_INDEXED:
                values[name] = value
        metadata = None
        if update_metadata or not idxs:
            metadata = {name: wire.encode_metadata(metadata_value(wrapper, name)) for name in catalog.names}
        return values, metadata

    @security.protected(ManageZCatalogEntries)
    def catalog_object(self, object, uid=None, idxs=None, update_metadata=1, pghandler=None):
        if idxs is None:
            idxs = []
        wrapper = object
        if not IIndexableObject.providedBy(object):
            adapted = queryMultiAdapter((object, self), IIndexableObject)
            if adapted is not None:
                wrapper = adapted
        if uid is None:
            try:
                uid = "/".join(object.getPhysicalPath())
            except AttributeError:
                raise CatalogError(
                    "A cataloged object must support the 'getPhysicalPath' method if no unique id is provided"
                ) from None
        if not isinstance(uid, str):
            raise CatalogError("The object unique id must be a string.")
        key = catalog_uid(uid)
        if idxs and update_metadata and set(idxs) >= set(self._catalog.indexes.keys()):
            # Every index and the metadata (Plone's clearFindAndRebuild names them all): what
            # ZCatalog does for no idxs, sent as a whole entry, which the service commits without
            # merging it into a row the catalog may not have.
            idxs = []
        if idxs:
            manager = self._manager(create=False)
            if manager is not None and manager.batch.flushed.get(key) in ("f", "p"):
                # Its entry was sent ahead (a large batch, in chunks) and is not here to merge the
                # indexes into: extracted whole, the entry replaces the one sent.
                idxs, update_metadata = [], 1
        # Extract first: an indexer error must not leave the counter marked for a batch without entries.
        values, metadata = self._extract(wrapper, idxs, update_metadata)
        self._settle_value_types(values)
        manager = self._changing()
        self._claim(manager, key)
        manager.batch.index(key, uid, values, metadata, list(idxs) if idxs else None)
        undo.note(self, uid)
        self._after_change(manager, pghandler)

    def _after_change(self, manager, pghandler=None) -> None:
        """Send a large batch ahead (BatchDataManager.stream), count the rebuild's progress, and
        keep the ZODB cache to its size as ZCatalog's catalog_object does (a savepoint, so that
        the objects this transaction changed can leave the cache too, then a cache GC): a
        rebuild reads every object of the site in one transaction."""
        manager.stream()
        progress_ = progress.current()
        if progress_ is not None:
            progress_.step()
        if self.maintain_zodb_cache():
            transaction.savepoint(optimistic=True)
            # The tool's own jar, or its site's: a tool swapped in by this transaction (the
            # connector's install) has none before the transaction's first savepoint.
            jar = self._p_jar or getattr(aq_parent(aq_inner(self)), "_p_jar", None)
            if jar is not None:
                jar.cacheGC()
            if progress_ is not None:
                progress_.info("committing subtransaction")
            elif pghandler is not None:
                pghandler.info("committing subtransaction")

    def maintain_zodb_cache(self):
        """Whether ``threshold`` objects were cataloged in this transaction since the last time
        (ZCatalog's count); the caller makes the savepoint and collects the cache. ZCatalog's
        own collects it here through ``self._p_jar``, which a tool new in this transaction does
        not have yet: installing the connector into a site of more than ``threshold`` objects
        failed with an AttributeError after ``threshold`` objects."""
        if self.threshold is None:
            return False
        current = id(transaction.get())
        if current != self._v_transaction:
            self._v_total = 0
        self._v_transaction = current
        self._v_total = self._v_total + 1
        if self._v_total > self.threshold:
            self._v_total = 0
            return True
        return False

    @security.protected(ManageZCatalogEntries)
    def uncatalog_object(self, uid):
        manager = self._changing()
        key = catalog_uid(uid)
        self._claim(manager, key)
        manager.batch.unindex(key)
        undo.note(self, uid)
        manager.stream()

    @security.protected(ManageZCatalogEntries)
    def manage_catalogClear(self, REQUEST=None, RESPONSE=None, URL1=None):
        """Remove every entry (in this transaction's batch, so a failed rebuild clears nothing)."""
        self._changing().batch.clear_all()
        self._hold_claims()
        undo.note(self, None)
        if REQUEST and RESPONSE:
            RESPONSE.redirect(URL1 + "/manage_catalogAdvanced?manage_tabs_message=Catalog%20Cleared")

    # -- schema -----------------------------------------------------------------------------

    @security.protected(ManageZCatalogIndexes)
    def addIndex(self, name, type, extra=None):
        ZCatalog.addIndex(self, name, type, extra)
        self._schema_changed()

    @security.protected(ManageZCatalogIndexes)
    def delIndex(self, name):
        removed = definitions(self._catalog).get(name)
        ZCatalog.delIndex(self, name)
        self._forget_value_type(name)  # an index added again under this name is typed afresh
        self._schema_changed(removed_index=name, removed_object=removed)

    def _forget_value_type(self, name: str) -> None:
        if name in (self._service_value_types or {}):
            self._service_value_types = {k: v for k, v in self._service_value_types.items() if k != name}

    def _index_cleared(self, name: str) -> None:
        """An index object's ``clear()``: GenericSetup's index importers call it when a profile
        changes the index's properties (indexed_attrs, since_field/until_field, a DateIndex's
        properties), ZCatalog's clearIndex (the ZMI) too. ZCatalog's index is empty then; the
        service's is replaced (its values dropped) once ZODB commits, before the batch, whose
        entries give it its new values (a reindexIndex of the same transaction)."""
        self._forget_value_type(name)
        self._schema_changed(cleared_index=name)

    @security.protected(ManageZCatalogIndexes)
    def addColumn(self, name, default_value=None):
        result = ZCatalog.addColumn(self, name, default_value)
        self._schema_changed()
        return result

    @security.protected(ManageZCatalogIndexes)
    def delColumn(self, name):
        result = ZCatalog.delColumn(self, name)
        self._schema_changed(removed_column=name)
        return result

    def _schema_changed(self, removed_index=None, removed_column=None, removed_object=None, cleared_index=None):
        # Sent when the transaction votes: GenericSetup sets an index's properties after adding it.
        # The counter moves too: every process's query cache (keyed on it) must miss once the
        # service's indexes change (values dropped with a replaced index, a column added).
        manager = self._changing()
        # The whole update sent after the commit declares every index as this transaction's
        # snapshot has them. So that it saw every schema change committed since, value typings
        # (_settle_value_types writes only the tool) included, every schema change writes the tool:
        # two at once conflict in ZODB, and the later one is retried from a fresh snapshot.
        self._p_changed = True
        pending = manager.schema_update
        if pending is None:
            pending = manager.schema_update = {"tool": self, "remove_indexes": set(), "remove_metadata": set(),
                                               "cleared": set(), "removed_objects": {}}
        if removed_index:
            pending["remove_indexes"].add(removed_index)
            if removed_object is not None:
                # The first one removed: the index the transaction's snapshot had.
                pending["removed_objects"].setdefault(removed_index, removed_object)
        if cleared_index:
            pending["cleared"].add(cleared_index)
        if removed_column:
            pending["remove_metadata"].add(removed_column)

    def _settle_value_types(self, values: dict) -> None:
        """Type a Field/Keyword index by the first value it is given (a new index is declared text).

        ZCatalog compares an index's values as the Python objects they are; the service needs to be
        told whether they are numbers, booleans or dates. A retyped declaration replaces the index in
        the service (dropping its values), so an index the service already holds values for keeps
        its type; a value of another type then fails the vote, as mixing types fails in ZCatalog.
        """
        settled = self._service_value_types or {}
        for name, value in values.items():
            if name in settled or name in KNOWN_VALUE_TYPES:
                continue
            if definition(self._catalog, name).meta_type not in TYPED_INDEXES:
                continue
            value_type = wire_value_type(value)
            if value_type is None:
                continue
            if value_type != "text" and self._service_holds_values(name):
                value_type = "text"
            settled = {**settled, name: value_type}
            # A new dict (not a mutation), so ZODB stores the change with this transaction.
            self._service_value_types = settled
            # Declared whatever the type, text too: the service may have the index typed
            # otherwise, by an aborted transaction that typed it while it held no values.
            self._schema_changed()

    def _service_holds_values(self, name: str) -> bool:
        manager = self._manager(create=False)
        if manager is not None and name in manager.replaced_indexes():
            return False  # what the service holds is dropped when this transaction commits
        try:
            return bool(self._client().unique_values(self.catalog_id(), name).values)
        except ServiceRejected as exc:
            if exc.status == 404:  # not declared in the service yet (the addIndex is pending)
                return False
            raise

    def schema_update(self, remove_indexes=(), remove_metadata=(), replace_indexes=()) -> SchemaUpdate:
        """``replace_indexes``: indexes (still there) whose values are dropped: removed and declared."""
        indexes = self.indexes()
        remove = [n for n in remove_indexes if n not in indexes]
        remove += sorted(n for n in set(replace_indexes) if n in indexes)
        return SchemaUpdate(
            indexes=declarations(self),
            metadata=list(self.schema()),
            remove_indexes=remove,
            remove_metadata=[n for n in remove_metadata if n not in self.schema()],
        )

    def _replaced(self, cleared, removed_objects: dict) -> set[str]:
        """The indexes a transaction replaces: cleared ones it still has, and ones it removed and
        added again (another object than the one removed: not a savepoint rollback's)."""
        stored = definitions(self._catalog)
        found = {n for n in cleared if n in stored}
        found.update(n for n, obj in removed_objects.items()
                     if n in stored and aq_base(stored[n]) is not aq_base(obj))
        return found

    @security.protected(ManageZCatalogEntries)
    def reindexIndex(self, name, REQUEST, pghandler=None):
        idxs = (name,) if isinstance(name, str) else tuple(name)
        paths = self._all_paths()
        with self._rebuilding(f"reindexIndex {', '.join(idxs)}", pghandler, len(paths)):
            for path in paths:
                obj = self.unrestrictedTraverse(path, None)
                if obj is None:
                    logger.error("reindexIndex could not resolve an object from the uid %r.", path)
                    continue
                self.catalog_object(obj, path, idxs=idxs, update_metadata=0)

    @security.protected(ManageZCatalogEntries)
    def refreshCatalog(self, clear=0, pghandler=None):
        paths = self._all_paths()
        if clear:
            self.manage_catalogClear()
        with self._rebuilding("refreshCatalog", pghandler, len(paths)):
            for path in paths:
                obj = self.unrestrictedTraverse(path, None)
                if obj is not None:
                    self.catalog_object(obj, path)

    @security.protected(ManageZCatalogEntries)
    def clearFindAndRebuild(self, pghandler=None):
        """Plone's rebuild (every object with reindexObject found in the site), with progress: the
        catalog's committed size is the estimate of the objects to go."""
        self._clear_find_and_rebuild(pghandler, len(self))

    def _clear_find_and_rebuild(self, pghandler=None, expected: int = 0) -> None:
        with self._rebuilding("clearFindAndRebuild", pghandler, expected):
            CatalogTool.clearFindAndRebuild(self)

    @security.private
    def reindexObject(self, object, idxs=[], update_metadata=1, uid=None):  # noqa: B006 - CMF's signature
        CatalogTool.reindexObject(self, object, idxs, update_metadata, uid)
        under_way = progress.current()
        if under_way is not None and under_way.queued():
            # A rebuild queues every object of the site (CMFCore's indexing queue), processed
            # only at the commit: processed here every chunk, so that the queue does not hold the
            # whole site and the progress is that of the objects really cataloged.
            processQueue()

    @contextlib.contextmanager
    def _rebuilding(self, what: str, pghandler, expected: int):
        """Count the objects cataloged in the block (progress.py); a rebuild inside a rebuild (the
        block of one within the other) counts in the outer one."""
        if progress.current() is not None:
            yield
            return
        every = self._client().settings.chunk_entries or 1000
        under_way = progress.begin(f"{what} of catalog {self.catalog_id()}", pghandler, expected, every)
        finished = False
        try:
            yield
            processQueue()  # what the block queued: cataloged (and counted) in it
            finished = True
        finally:
            progress.end(under_way, finished)

    def _all_brains(self):
        """Every entry of this site (an empty query matches nothing in the service)."""
        site_path = "/".join(aq_parent(aq_inner(self)).getPhysicalPath())
        return self.unrestrictedSearchResults(path=site_path)

    def _all_paths(self) -> list[str]:
        """The path of every entry of this site, as this transaction sees them, in pages without
        metadata: a large site's brains with all their metadata would take memory by its size."""
        client = self._client()
        catalog_id = self.catalog_id()
        batch_ids = self._own_batches(client)
        _, marked = self._counter_state()
        self._await_marked(client, catalog_id, [i for i in batch_watch.pending(marked) if i not in batch_ids])
        site_path = "/".join(aq_parent(aq_inner(self)).getPhysicalPath())
        query = self._wire_query({"path": site_path})[0]
        paths: list[str] = []
        while True:
            request = SearchRequest(query=query, metadata=[], b_start=len(paths), b_size=PATH_PAGE,
                                    batch_ids=batch_ids, show_inactive=True)
            result = client.search(catalog_id, request, None, unrestricted=True)
            paths.extend(item["path"] for item in result.items)
            if not result.items or len(paths) >= result.items_total:
                return paths

    # -- searching --------------------------------------------------------------------------

    def _wire_query(self, query: dict, unrestricted: bool = False) -> tuple[dict, int, int | None, int | None]:
        """The query as the service reads it, and its batch (wire.wire_query)."""
        catalog = self._catalog
        stored = definitions(catalog)

        def index_named(name):
            # The index object itself: a proxy (_catalog.indexes[name]) costs a few us per key here.
            index = stored.get(name)
            return None if index is None else index.__of__(catalog)

        return wire.wire_query(query, index_named, unrestricted)

    def _own_batches(self, client) -> list[str]:
        """The staged batch of this transaction, for a read that must see its pending changes."""
        retry_unfinished(client, self)
        outcomes.watch(self)
        ordering.flush()
        manager = self._manager(create=False)
        if manager is not None and manager.batch:
            # Our own pending changes must be visible to us (and only to us): stage them.
            changed = manager.batch.dirty
            manager.stage()
            if manager.batch.staged:
                if changed:
                    transaction_memo().changed()
                return [manager.batch.batch_id]
        return []

    def _service_search(self, query: dict, principals, show_inactive: bool, metadata: bool = True) -> LazyResults:
        """``metadata``: False for a caller that reads only rids and paths (no column is fetched)."""
        client = self._client()
        catalog_id = self.catalog_id()
        batch_ids = self._own_batches(client)
        unrestricted = principals is None
        wire_query, b_start, b_size, sort_limit_stop = self._wire_query(query, unrestricted)
        page_size = client.settings.page_size
        if b_size is not None:
            # A batch the caller asked for is what it reads: fetched whole up to WHOLE_BATCH.
            page_size = max(1, min(b_size, max(page_size, WHOLE_BATCH)))
        principal_key = None if principals is None else tuple(principals)
        query_text = json.dumps(wire_query, sort_keys=True, default=str)
        counter, marked = self._counter_state()
        cache = query_cache
        if batch_ids:
            # The answers depend on our staged batch: only this transaction may reuse them.
            cache = transaction_memo()
            counter = (tuple(batch_ids), cache.changes)
        schema = {name: i for i, name in enumerate(self._catalog.names)}

        def fetch(start: int, size: int):
            key = (catalog_id, counter, principal_key, show_inactive, query_text, start, size, metadata)
            cached = cache.get(key)
            if cached is not None:
                return cached

            def send(after_batch):
                request = SearchRequest(
                    query=wire_query,
                    metadata="*" if metadata else [],
                    b_start=start,
                    b_size=size,
                    batch_ids=batch_ids,
                    show_inactive=show_inactive,
                    after_batch=after_batch,
                )
                return client.search(catalog_id, request, principals, unrestricted=unrestricted)

            # Our own staged batch is named in batch_ids, so the answer includes it: never wait for it.
            pending = [i for i in batch_watch.pending(marked) if i not in batch_ids]
            complete = self._await_marked(client, catalog_id, pending[:-1])
            if pending:
                result = until_complete(send, pending[-1], catalog_id)
                complete = complete and result.complete
            else:
                result = send(None)
            page = (result.items_total, [BrainRecord.from_item(item) for item in result.items])
            if complete:
                cache.put(key, page)
            return page

        total, first = fetch(b_start, page_size)
        length = max(0, total - b_start) if b_size is None else max(0, min(b_size, total - b_start))
        if sort_limit_stop is not None and not b_start > total / 2:
            length = min(length, max(0, sort_limit_stop - b_start))
        top_score = None
        if first and first[0].score is not None:
            # Normalized scores are relative to the result's best, which leads its first page.
            best = first if b_start == 0 else fetch(0, 1)[1]
            top_score = best[0].score if best else first[0].score
        tool = self

        def wrap(record):
            return CatalogBrain(record, schema, top_score).__of__(tool)

        def fetch_page(start, size):
            return fetch(b_start + start, size)[1]

        # Pages of the lazy sequence are aligned to page_size from the batch start.
        return LazyResults(wrap, fetch_page, first[:length], 0, length, total, page_size)

    def _counter_value(self) -> int:
        counter = self._counter
        return counter() if counter is not None else 0

    def _counter_state(self) -> tuple[int, tuple[str, ...]]:
        """The counter and the batches it stands for, both as this transaction's snapshot has them."""
        mark = self._catalog_batches
        return self._counter_value(), (mark.ids if mark is not None else ())

    def _await_marked(self, client, catalog_id: str, batch_ids) -> bool:
        """Wait (briefly) for marked batches besides the one the query itself names.

        More than one is marked only after concurrent transactions' marks were merged: rare, so a
        small probe query per extra batch is fine.
        """
        if not batch_ids:
            return True
        site_path = "/".join(aq_parent(aq_inner(self)).getPhysicalPath())

        def probe(after_batch):
            request = SearchRequest(
                query={"path": {"query": site_path, "depth": 0}}, metadata=[], b_size=1,
                show_inactive=True, after_batch=after_batch,
            )
            return client.search(catalog_id, request, None, unrestricted=True)

        return all([until_complete(probe, batch_id, catalog_id).complete for batch_id in batch_ids])

    @security.protected(SearchZCatalog)
    def searchResults(self, query=None, **kw):
        # Products.CMFPlone.CatalogTool.searchResults, with the principals sent to the service
        # instead of an allowedRolesAndUsers query term.
        processQueue()
        kw = kw.copy()
        show_inactive = kw.get("show_inactive", None)
        if show_inactive is None and isinstance(query, dict):
            show_inactive = query.get("show_inactive", None)
        if show_inactive is None:
            show_inactive = self.allow_inactive(kw)
        user = _getAuthenticatedUser(self)
        principals = self._listAllowedRolesAndUsers(user)
        if not show_inactive:
            kw["effectiveRange"] = minute(DateTime())
        sort_on = kw.get("sort_on") or []
        if isinstance(sort_on, str):
            sort_on = [sort_on]
        valid_indexes = self.indexes()
        try:
            sort_on = [idx for idx in sort_on if idx in valid_indexes]
        except TypeError:
            sort_on = []
        if not sort_on:
            kw.pop("sort_on", None)
        else:
            kw["sort_on"] = sort_on
        merged = self._query_of(query, kw)
        # effectiveRange (when due) is already in the query, so the service must not add its own.
        return self._service_search(merged, principals, show_inactive=True)

    @zpublish(False)
    def __call__(self, *args, **kwargs):
        return self.searchResults(*args, **kwargs)

    @security.private
    def unrestrictedSearchResults(self, REQUEST=None, **kw):
        processQueue()
        return self._service_search(self._query_of(REQUEST, kw), None, show_inactive=True)

    @security.private
    def _unrestrictedSearchResults(self, REQUEST=None, **kw):
        query = self._query_of(REQUEST, kw)
        if self._is_new_unmentioned_subtree(query):
            return LazyResults(None, None, [], 0, 0, 0, 1)
        return self._service_search(query, None, show_inactive=True)

    def _is_new_unmentioned_subtree(self, query: dict) -> bool:
        """Whether ``query`` asks only for the subtree of an object created in this transaction
        that none of the transaction's catalog changes mention: then nothing can match.

        CMFCatalogAware.reindexObjectSecurity asks exactly that for every object it creates (its
        workflow's initial state); answering here saves a round trip per new object. Committed
        catalog entries at or under the path would need a committed object there, and a new
        object has none; the transaction's own entries are checked.
        """
        path = query.get("path")
        if len(query) != 1 or not isinstance(path, str) or not path.startswith("/"):
            return False
        obj = self.unrestrictedTraverse(path, None)
        if obj is None or not created_in_this_transaction(obj):
            return False
        manager = self._manager(create=False)
        return manager is None or not manager.batch.mentions(path)

    def has_full_entry(self, path: str) -> bool:
        """Whether this transaction's batch indexes ``path`` with every index (not only some)."""
        manager = self._manager(create=False)
        if manager is None:
            return False
        key = catalog_uid(path)
        entry = manager.batch.entries.get(key)
        if entry is None:
            return manager.batch.flushed.get(key) == "f"  # sent ahead (a large batch)
        return entry["op"] == "index" and "idxs" not in entry

    def _query_of(self, query, kw: dict) -> dict:
        """The query of a searchResults call. ZCatalog's Catalog.searchResults takes ``_merge`` as
        an argument (a query key named so is only a query key)."""
        unmerged = not kw.pop("_merge", True)
        merged = _merge_query(query, kw)
        if unmerged:
            self._refuse_records(merged, "searchResults(_merge=False)",
                                 sorted_=bool(merged.get("sort_on") or merged.get("sort-on")))
        return merged

    def _refuse_records(self, query, call: str, sorted_: bool) -> None:
        """Unmerged, ZCatalog answers brains too, unless it sorts or scores by relevance: then it
        gives its result records, which the service cannot (errors.UnmergedResultsUnsupported)."""
        text = [name for name in query if getattr(self._catalog.indexes.get(name), "meta_type", None) == "ZCTextIndex"]
        if sorted_ or text:
            raise UnmergedResultsUnsupported(
                f"{call} with {'a sort' if sorted_ else 'a text query'}: ZCatalog answers its raw result "
                f"records, which the service catalog does not have; ask for brains (merged results)")

    def search(self, query, sort_index=None, reverse=0, limit=None, merge=1):
        if not merge:
            self._refuse_records(query, "search(merge=0)", sorted_=sort_index is not None)
        query = dict(query)
        if sort_index is not None:
            query["sort_on"] = sort_index
            if reverse:
                query["sort_order"] = "reverse"
        if limit:
            query["sort_limit"] = limit
        processQueue()
        user = _getAuthenticatedUser(self)
        principals = self._listAllowedRolesAndUsers(user)
        if not self.allow_inactive(query):
            query["effectiveRange"] = minute(DateTime())
        return self._service_search(query, principals, show_inactive=True)

    # -- reading single entries -------------------------------------------------------------

    # -- index data (for the proxies of indexes.py) ----------------------------------------

    def _unique_values(self, name: str, lengths: bool = False, attribute: str | None = None):
        """The service's unique values of index ``name`` as this transaction sees them."""
        return self._index_read(("unique values", name, lengths, attribute),
                                lambda client, catalog_id, batch_ids:
                                client.unique_values(catalog_id, name, batch_ids, lengths, attribute))

    def _text_index_size(self, name: str):
        """The distinct words and documents of ZCTextIndex ``name`` as this transaction sees them."""
        return self._index_read(("text index size", name),
                                lambda client, catalog_id, batch_ids:
                                client.text_index_size(catalog_id, name, batch_ids))

    def _index_read(self, what: tuple, fetch):
        """``fetch(client, catalog_id, batch_ids)``: index data read as this transaction sees it,
        cached as searches are."""
        processQueue()
        client = self._client()
        catalog_id = self.catalog_id()
        batch_ids = self._own_batches(client)
        counter, marked = self._counter_state()
        cache = query_cache
        if batch_ids:
            cache = transaction_memo()
            counter = (tuple(batch_ids), cache.changes)
        key = (catalog_id, counter, *what)
        cached = cache.get(key)
        if cached is not None:
            return cached
        pending = [i for i in batch_watch.pending(marked) if i not in batch_ids]
        complete = self._await_marked(client, catalog_id, pending)
        found = fetch(client, catalog_id, batch_ids)
        if complete:
            cache.put(key, found)
        return found

    def _remember_rid(self, rid: int, path: str) -> None:
        _rid_paths(self.catalog_id())[rid] = path

    def _rids_for(self, query: dict) -> list[int]:
        """The rids an unrestricted query matches; their paths are kept for getpath."""
        paths = _rid_paths(self.catalog_id())
        rids = []
        processQueue()  # as unrestrictedSearchResults
        for brain in self._service_search(self._query_of(None, dict(query)), None, show_inactive=True, metadata=False):
            rid = brain.getRID()
            paths[rid] = brain.getPath()
            rids.append(rid)
        return rids

    def value_type(self, name: str) -> str | None:
        """The value type the service holds Field/Keyword index ``name`` in (schema.py)."""
        return (self._service_value_types or {}).get(name) or KNOWN_VALUE_TYPES.get(name)

    @security.protected(SearchZCatalog)
    def uniqueValuesFor(self, name):
        if name not in self._catalog.indexes:
            raise KeyError(name)  # as ZCatalog's (its getIndex looks the name up)
        # As ZCatalog's: whatever the index's uniqueValues answers or raises (a ZCTextIndex's
        # raises NotImplementedError, a GopipIndex has none: AttributeError).
        return tuple(service_index(definition(self._catalog, name), self).uniqueValues())

    def _brain_for_path(self, path):
        results = self.unrestrictedSearchResults(path={"query": path, "depth": 0})
        for brain in results:
            if brain.getPath() == path:
                brain.getRID()  # remembers the pair for getpath
                return brain
        return None

    @security.protected(SearchZCatalog)
    def getpath(self, rid):
        path = _rid_paths(self.catalog_id()).get(rid)
        if path is not None:
            return path
        for brain in self._all_brains():
            if brain.getRID() == rid:
                return brain.getPath()
        raise KeyError(rid)

    @security.protected(SearchZCatalog)
    def getrid(self, path, default=None):
        brain = self._brain_for_path(path)
        return default if brain is None else brain.getRID()

    @security.protected(SearchZCatalog)
    def getobject(self, rid, REQUEST=None):
        return aq_parent(self).unrestrictedTraverse(self.getpath(rid))

    @security.protected(SearchZCatalog)
    def getIndexDataForUID(self, uid):
        processQueue()
        entry = self._client().get_object(self.catalog_id(), catalog_uid(uid))
        if entry is None:
            raise KeyError(uid)
        return dict(entry.get("indexes", {}))

    @security.protected(SearchZCatalog)
    def getMetadataForUID(self, uid):
        processQueue()
        entry = self._client().get_object(self.catalog_id(), catalog_uid(uid))
        if entry is None:
            raise KeyError(uid)
        metadata = {k: wire.decode_metadata(v) for k, v in entry.get("metadata", {}).items()}
        return {name: metadata.get(name, Missing.Value) for name in self._catalog.names}

    @security.protected(SearchZCatalog)
    def getIndexDataForRID(self, rid):
        return self.getIndexDataForUID(self.getpath(rid))

    @security.protected(SearchZCatalog)
    def getMetadataForRID(self, rid):
        return self.getMetadataForUID(self.getpath(rid))

    @security.protected(SearchZCatalog)
    def getAllBrains(self):
        yield from self._all_brains()

    @security.protected(ManageZCatalogEntries)
    def getServiceStats(self) -> dict:
        """Query cache hit rate, service requests per page render (this process)."""
        from .views import service_stats

        return service_stats()

    def __len__(self):
        return self._client().get_catalog(self.catalog_id()).objects

    def __bool__(self):
        # Truth tests on the tool are common; they must not cost a round trip (or depend on size).
        return True


def _rid_paths(catalog_id: str) -> dict:
    """The rid -> path pairs this transaction's lookups found in catalog ``catalog_id``."""
    txn = transaction.get()
    try:
        found = txn.data(_RID_PATHS)
    except KeyError:
        found = {}
        txn.set_data(_RID_PATHS, found)
    return found.setdefault(catalog_id, {})


def _forget_rid_paths() -> None:
    with contextlib.suppress(KeyError):
        transaction.get().data(_RID_PATHS).clear()


def _merge_query(query, kw) -> dict:
    merged = {}
    if query is not None and hasattr(query, "keys"):
        if hasattr(query, "form"):
            # A REQUEST passed as the query: ZCatalog reads its form.
            query = query.form
        keys = list(query.keys())
        for key in keys:
            merged[key] = query[key]
    merged.update(kw)
    return merged


InitializeClass(ServiceCatalogTool)
