"""Which catalog batches committed in ZODB, recorded in ZODB itself, and resolving those a crash
left staged in the service (docs/decisions/0011).

A Plone process that dies between the ZODB commit and the service commit (or between the vote and
the ZODB commit) leaves its batch staged in the service. Whether that transaction committed is
known only to ZODB, so every transaction with catalog changes writes its batch id, with the time,
into a BTree on the catalog tool (``record``), inside the transaction itself: the id is there in
any later snapshot if and only if the transaction committed, whatever the storage.

Every Plone process that used the catalog runs a background thread (``watch``) that, every
``resolve_interval`` seconds, asks the service for the catalog's batches staged longer than
``resolve_after`` seconds and reads the log in a fresh ZODB snapshot: a batch found there is
committed, one not found is aborted (its transaction had that long to commit). It also tells the
service that this catalog's client resolves its batches, so the service's own resolver does not
abort them first. Nothing of this runs in a request.

The log is pruned by the transactions that write it: each removes expired entries among the few
that follow its own id (random ids: the bucket it writes anyway, mostly). An entry expires only
well after a resolution run of this process that found nothing left to resolve.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from dataclasses import dataclass

import transaction as transaction_module
from Acquisition import aq_base
from BTrees.OOBTree import OOBTree

from .errors import CatalogServiceError

logger = logging.getLogger("plone_connector.catalog")

# The tool's attribute holding the log: batch id -> commit time (epoch seconds).
LOG_ATTRIBUTE = "_catalog_batch_log"
# Entries after its own id that a transaction looks at for expired ones.
PRUNE_SCAN = 8
# An entry is kept this long after the last clean resolution run minus resolve_after. It covers
# the time between a transaction's before-commit hooks (its log time) and the staging of its batch
# (the service's age), i.e. the ZODB connections' commit, and clock differences.
PRUNE_MARGIN = 3600
# Staged batches asked for per resolution run; more means the run is not clean (no pruning).
LIST_LIMIT = 100


# Per catalog: wall-clock time at the start of this process's last clean resolution run.
_last_clean: dict[str, float] = {}
_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked process has none of its parent's threads (and maybe a lock one of them held):
    start again, watching nothing."""
    global _thread, _lock
    _lock = threading.Lock()
    _last_clean.clear()
    _watched.clear()
    _thread = None


# -- recording --------------------------------------------------------------------------------

def record(tool, manager) -> None:
    """Have the transaction of ``manager`` write its batch id into the tool's log when it commits."""
    if getattr(manager, "outcome_recorded", False):
        return
    manager.outcome_recorded = True
    # At commit, not now: the time is the commit's (a long transaction must not look old), and the
    # hook runs before the ZODB connections store, so the log is written in this transaction.
    manager._txn.addBeforeCommitHook(_write, (aq_base(tool), tool.catalog_id(), manager.batch.batch_id))


def _write(tool, catalog_id: str, batch_id: str) -> None:
    log = getattr(tool, LOG_ATTRIBUTE, None)
    if log is None:
        log = OOBTree()
        setattr(tool, LOG_ATTRIBUTE, log)
    log[batch_id] = int(time.time())
    cutoff = _prune_cutoff(catalog_id)
    if cutoff is None:
        return
    following = itertools.islice(log.items(batch_id, excludemin=True), PRUNE_SCAN)
    for key in [key for key, stamp in following if stamp < cutoff]:
        del log[key]


def _prune_cutoff(catalog_id: str) -> int | None:
    """Entries older than this are resolved for sure, or None: no recent clean resolution run."""
    from .client import get_client

    settings = get_client().settings
    last_clean = _last_clean.get(catalog_id)
    if last_clean is None or time.time() - last_clean > 2 * max(settings.resolve_interval, 60):
        return None
    return int(last_clean - settings.resolve_after - PRUNE_MARGIN)


@contextlib.contextmanager
def fresh_object(db, oid: bytes):
    """The object ``oid`` as ZODB has it now: read in a fresh snapshot (not the one of the
    caller's transaction, nor the connection pool's last use), on a connection of its own."""
    manager = transaction_module.TransactionManager()
    connection = db.open(transaction_manager=manager)
    try:
        manager.begin()
        yield connection.get(oid)
    finally:
        manager.abort()
        connection.close()


def committed_ids(db, tool_oid: bytes, batch_ids) -> set[str]:
    """Those of ``batch_ids`` whose transactions committed, read in a fresh ZODB snapshot."""
    with fresh_object(db, tool_oid) as tool:
        log = getattr(tool, LOG_ATTRIBUTE, None)
        return {batch_id for batch_id in batch_ids if log is not None and batch_id in log}


# -- resolving --------------------------------------------------------------------------------

@dataclass
class _Watched:
    db: object
    tool_oid: bytes
    catalog_id: str


# The catalogs this process has used, by catalog id, with the database and the tool to read their
# log from (the latest seen: a database reopened replaces the closed one); resolved on a thread.
_watched: dict[str, _Watched] = {}
_thread: threading.Thread | None = None
_wake = threading.Event()


def watch(tool) -> None:
    """Have this process's resolver thread look after the tool's catalog (cheap once done)."""
    global _thread
    base = aq_base(tool)
    jar, oid = base._p_jar, base._p_oid
    if jar is None or oid is None:
        return
    db = jar.db()
    catalog_id = tool.catalog_id()
    known = _watched.get(catalog_id)
    if known is not None and known.db is db and known.tool_oid == oid:
        return
    with _lock:
        _watched[catalog_id] = _Watched(db, oid, catalog_id)
        if _thread is None:
            _thread = threading.Thread(target=_resolver_loop, name="catalog-resolver", daemon=True)
            _thread.start()
    _wake.set()  # a first run now: the service learns soon that this catalog's client resolves


def unwatch(catalog_id: str) -> None:
    """Stop resolving the batches of a catalog (dropped at uninstall)."""
    with _lock:
        _watched.pop(catalog_id, None)


def _resolver_loop() -> None:
    from .client import CatalogClient, get_client

    while True:
        _wake.clear()
        settings = get_client().settings
        if settings.resolve_interval > 0:
            for key, watched in list(_watched.items()):
                # Its own client: these requests are not the page's (counts, connection pool).
                client = CatalogClient(settings)
                try:
                    resolve(client, watched.db, watched.tool_oid, watched.catalog_id, settings.resolve_after)
                except _ZODBUnreadable:
                    # Closed (tests, shutdown) or failing: forgotten until the tool is used again.
                    if _watched.get(key) is watched:
                        _watched.pop(key, None)
                    logger.warning("catalog %s: ZODB not readable for batch resolution", watched.catalog_id,
                                   exc_info=True)
                except Exception:
                    # The next run tries again.
                    logger.warning("resolving the expired batches of catalog %s failed", watched.catalog_id,
                                   exc_info=True)
                finally:
                    client.close()
        _wake.wait(settings.resolve_interval if settings.resolve_interval > 0 else 60)


def wake() -> None:
    """Run the resolver thread now (after a change of its settings; tests)."""
    _wake.set()


class _ZODBUnreadable(Exception):
    pass


def resolve_expired(tool, older_than: float | None = None) -> list[tuple[str, str]]:
    """Resolve the tool's catalog now (operations, tests): see ``resolve``."""
    client = tool._client()
    if older_than is None:
        older_than = client.settings.resolve_after
    base = aq_base(tool)
    return resolve(client, base._p_jar.db(), base._p_oid, tool.catalog_id(), older_than)


def resolve(client, db, tool_oid: bytes, catalog_id: str, older_than: float) -> list[tuple[str, str]]:
    """Commit or abort the catalog's batches staged more than ``older_than`` seconds ago, by
    whether ZODB has their ids; return (batch id, outcome) pairs."""
    started = time.time()
    client.declare_resolver(catalog_id)
    staged = client.staged_batches(catalog_id, older_than, LIST_LIMIT)
    clean = len(staged) < LIST_LIMIT
    outcomes = []
    if staged:
        # The snapshot is taken after the listing: a transaction whose batch was staged that long
        # ago has committed by now, or never will.
        try:
            committed = committed_ids(db, tool_oid, staged)
        except Exception as exc:
            raise _ZODBUnreadable(str(exc)) from exc
        for batch_id in staged:
            outcome = "committed" if batch_id in committed else "aborted"
            try:
                if outcome == "committed":
                    client.commit_batch(catalog_id, batch_id)
                else:
                    client.abort_batch(catalog_id, batch_id)
            except CatalogServiceError as exc:
                # E.g. a 409: its own process finished it the other way meanwhile.
                clean = False
                logger.error("catalog %s: expired batch %s could not be %s: %s", catalog_id, batch_id, outcome, exc)
                continue
            outcomes.append((batch_id, outcome))
            logger.warning("catalog %s: batch %s, left staged by a crash, %s", catalog_id, batch_id, outcome)
    if clean:
        _last_clean[catalog_id] = started
    return outcomes


os.register_at_fork(after_in_child=_after_fork_in_child)
