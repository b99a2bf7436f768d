"""Make the catalog follow a ZODB undo (docs/decisions/0017-catalog-follows-undo.md).

ZCatalog keeps its entries in ZODB, so an undo restores them with the content. The service's
entries are not in ZODB, and an undo runs no Plone event. So every transaction with catalog changes
notes, in its transaction extension, the paths whose entries it changed (``note``), per catalog
tool; ``DB.undoMultiple`` (every undo: the ZMI's, portal_undo's, ``DB.undo``) is wrapped to read
those notes of the transactions undone and, once the undo has committed, to reindex or unindex
each noted path from the restored state, in a transaction of its own, before the undo's commit
returns. The undo transaction notes the same paths, so undoing the undo follows too.
"""

from __future__ import annotations

import functools
import logging
import threading

import transaction
from AccessControl.SecurityManagement import newSecurityManager, noSecurityManager
from AccessControl.SpecialUsers import system
from Acquisition import aq_base, aq_inner, aq_parent
from plone.base.utils import base_hasattr
from Testing.makerequest import makerequest
from ZODB.DB import DB
from ZODB.POSException import ConflictError
from zope.component.hooks import getSite, setSite
from zope.globalrequest import getRequest, setRequest
from ZPublisher.BaseRequest import RequestContainer

logger = logging.getLogger("plone_connector.catalog")

# Transaction extension key: {catalog tool path: [entry paths changed] or None (too many, or a
# clear: the whole catalog)}.
EXTENSION_KEY = "catalog_paths"
# FileStorage keeps at most 64 KiB of pickled extension per transaction (the batch ids too):
# beyond this many bytes of paths a tool's note becomes None, and its undo compares the
# whole site (verify).
MAX_NOTED_SIZE = 30_000
FOLLOW_ATTEMPTS = 3
_FOLLOWING = object()  # transaction data: set in the transaction that follows an undo


def following() -> bool:
    """Whether this transaction reindexes what an undo restored (it writes no uid claims: a
    later undo of that undo would conflict with them, decisions/0017)."""
    try:
        return bool(transaction.get().data(_FOLLOWING))
    except KeyError:
        return False


class _Noted:
    """What a transaction noted so far (in its data): the paths, and their size in the extension."""

    def __init__(self):
        self.paths: set[tuple[str, str]] = set()
        self.size = 0


def note(tool, path: str | None) -> None:
    """Note that this transaction changes the entry of ``path`` (None: every entry, a clear)."""
    txn = transaction.get()
    _add(txn, {"/".join(tool.getPhysicalPath()): None if path is None else [path]})


def _add(txn, notes: dict) -> None:
    """Merge ``notes`` ({tool path: paths or None}) into the extension of transaction ``txn``."""
    try:
        seen = txn.data(_Noted)
    except KeyError:
        seen = _Noted()
        txn.set_data(_Noted, seen)
    noted = txn.extension.setdefault(EXTENSION_KEY, {})
    for tool_path, paths in notes.items():
        if tool_path in noted and noted[tool_path] is None:
            continue
        if paths is None:
            noted[tool_path] = None
            continue
        known = noted.setdefault(tool_path, [])
        for path in paths:
            if (tool_path, path) in seen.paths:
                continue
            size = len(path.encode("utf-8", "surrogatepass")) + 4  # as pickled, about
            if seen.size + size > MAX_NOTED_SIZE:
                noted[tool_path] = None
                break
            seen.paths.add((tool_path, path))
            seen.size += size
            known.append(path)


def _undone_notes(db, ids) -> dict:
    """The paths the transactions with undo ids ``ids`` noted, merged per tool."""
    wanted = set(ids)
    merged: dict = {}
    for entry in db.undoLog(0, -len(wanted), lambda entry: entry.get("id") in wanted):
        for tool_path, paths in (entry.get(EXTENSION_KEY) or {}).items():
            if paths is None or merged.get(tool_path, ()) is None:
                merged[tool_path] = None
            else:
                merged.setdefault(tool_path, []).extend(paths)
    return merged


def _counters(db, tool_paths) -> dict:
    """Each tool's catalog counter now, before the undo moves it back (read in a fresh snapshot)."""
    manager = transaction.TransactionManager()
    connection = db.open(transaction_manager=manager)
    try:
        manager.begin()
        app = connection.root().get("Application")
        found = {}
        for tool_path in tool_paths:
            tool = app.unrestrictedTraverse(tool_path, None) if app is not None else None
            if tool is not None and hasattr(aq_base(tool), "getCounter"):
                found[tool_path] = tool.getCounter()
        return found
    finally:
        manager.abort()
        connection.close()


def _following(undo_multiple):
    @functools.wraps(undo_multiple)
    def undoMultiple(self, ids, txn=None):
        result = undo_multiple(self, ids, txn)
        notes = _undone_notes(self, ids)
        if notes:
            txn = txn if txn is not None else transaction.get()
            _add(txn, notes)  # so that undoing this undo follows too
            txn.addAfterCommitHook(_after_undo, (self, notes, _counters(self, notes), getRequest()))
        return result

    undoMultiple.follows_catalog_undo = True
    return undoMultiple


def follow_undos() -> None:
    """Wrap ``DB.undoMultiple`` (``DB.undo`` calls it); once per process."""
    if not getattr(DB.undoMultiple, "follows_catalog_undo", False):
        DB.undoMultiple = _following(DB.undoMultiple)


def _after_undo(committed: bool, db, notes: dict, counters: dict, request) -> None:
    if not committed:
        return
    # A thread of its own: its own transaction (the undo's is ending), site and security.
    worker = threading.Thread(target=_reindex_undone, args=(db, notes, counters, request),
                              name="catalog-undo", daemon=True)
    worker.start()
    worker.join()


def _reindex_undone(db, notes: dict, counters: dict, request) -> None:
    setRequest(request)
    newSecurityManager(None, system)
    connection = db.open()
    try:
        for attempt in range(1, FOLLOW_ATTEMPTS + 1):
            try:
                transaction.begin()
                transaction.get().set_data(_FOLLOWING, True)
                app = connection.root()["Application"]
                if request is not None:
                    app = aq_base(app).__of__(RequestContainer(REQUEST=request))
                else:
                    # Indexers read the request (is_default_page looks up the default page
                    # through it): an undo from a script gets one as zconsole's scripts do.
                    app = makerequest(app)
                    setRequest(app.REQUEST)
                for tool_path, paths in notes.items():
                    tool = app.unrestrictedTraverse(tool_path, None)
                    if tool is not None and hasattr(aq_base(tool), "_changing"):
                        follow(tool, paths, counters.get(tool_path))
                transaction.get().note("Catalog entries of an undo")
                transaction.commit()
                return
            except ConflictError:
                transaction.abort()
                if attempt == FOLLOW_ATTEMPTS:
                    raise
    except Exception:
        # The undo has committed; its catalog entries can only be mended now.
        logger.exception("The catalog did not follow an undo of %s; run verify --repair",
                         ", ".join(notes))
        transaction.abort()
    finally:
        connection.close()
        setSite(None)
        noSecurityManager()
        setRequest(None)


def follow(tool, paths, counter_before: int | None = None) -> None:
    """Reindex the entries of ``paths`` from what ZODB holds now, and unindex those whose object
    is gone (``paths`` None: compare the whole site and repair). The counter ends above what it
    was before the undo moved it back, so no cache keyed on it answers from the undone state."""
    site = aq_parent(aq_inner(tool))
    previous = getSite()
    setSite(site)
    try:
        if paths is None:
            from .verify import verify

            verify(site, repair=True)
        else:
            root = tool.getPhysicalRoot()
            for path in paths:
                if not path.startswith("/"):
                    continue  # a uid given by the caller, not a path: nothing to look up
                obj = root.unrestrictedTraverse(path, None)
                # Traversal may acquire a namesake from a parent: only the object at the path counts.
                if (obj is not None and base_hasattr(obj, "reindexObject")
                        and "/".join(obj.getPhysicalPath()) == path):
                    tool.catalog_object(obj, path)
                else:
                    tool.uncatalog_object(path)
        tool._changing()
        counter = tool._counter
        if counter is not None and counter_before is not None and counter() <= counter_before:
            counter.change(counter_before + 1 - counter())
    finally:
        setSite(previous)


follow_undos()
