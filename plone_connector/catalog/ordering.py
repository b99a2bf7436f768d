"""Keep getObjPositionInParent right when siblings move.

Plone's GopipIndex stores nothing: ZCatalog asks the container for positions when it sorts. The
service sorts on stored positions, so when an add, removal, move or reorder shifts siblings, their
positions must be sent again. Per transaction we remember each touched container's order as it was
before the first change, and before the batch is sent we re-send the position of every child whose
position differs from that (or of all children when a reorder came first and the old order is lost).
"""

from __future__ import annotations

import functools

import transaction
from Acquisition import aq_base
from OFS.interfaces import IObjectWillBeMovedEvent
from plone.folder.default import DefaultOrdering
from plone.folder.interfaces import IExplicitOrdering
from plone.folder.partial import PartialOrdering
from Products.CMFCore.utils import getToolByName
from zope.component import adapter
from zope.container.interfaces import IContainerModifiedEvent
from zope.lifecycleevent.interfaces import IObjectMovedEvent

from .interfaces import is_service_tool
from .new_objects import created_in_this_transaction

GOPIP = "getObjPositionInParent"
_KEY = object()


def _ordered_ids(container):
    get_ordering = getattr(aq_base(container), "getOrdering", None)
    if get_ordering is None:
        return None
    ordering = container.getOrdering()
    if not IExplicitOrdering.providedBy(ordering):
        return None
    return list(ordering.idsInOrder())


def _service_tool(container):
    tool = getToolByName(container, "portal_catalog", None)
    if tool is not None and is_service_tool(tool):
        return tool
    return None


class _Touched:
    """Containers touched in one transaction: path -> (container, ids before or None for 'all')."""

    def __init__(self):
        self.containers: dict[tuple, list] = {}
        self.hooked = False


def _touched() -> _Touched:
    txn = transaction.get()
    try:
        state = txn.data(_KEY)
    except KeyError:
        state = None
    if state is None:
        state = _Touched()
        txn.set_data(_KEY, state)
    return state


def _touch(container, before_ids):
    if container is None or _service_tool(container) is None:
        return
    state = _touched()
    key = container.getPhysicalPath()
    if key not in state.containers:
        state.containers[key] = [container, before_ids]
    if not state.hooked:
        transaction.get().addBeforeCommitHook(flush)
        state.hooked = True


@adapter(IObjectMovedEvent)
def child_added(event):
    # Added or moved in (the removal half of a move was seen by child_moving).
    parent = event.newParent
    if parent is None:
        return
    ids = _ordered_ids(parent)
    if ids is None:
        return
    _touch(parent, [i for i in ids if i != event.newName])


@adapter(IObjectWillBeMovedEvent)
def child_moving(event):
    parent = event.oldParent
    if parent is None:
        return
    ids = _ordered_ids(parent)
    if ids is None:
        return
    _touch(parent, ids)


@adapter(IContainerModifiedEvent)
def container_modified(event):
    container = event.object
    if _ordered_ids(container) is None:
        return
    # Untouched so far in this transaction: a reorder; the order before it is gone.
    _touch(container, None)


def _noticing(order_objects):
    @functools.wraps(order_objects)
    def orderObjects(self, key=None, reverse=None):
        # plone.folder sorts the order in place here without any event (moveObjectsByDelta
        # notifies IContainerModifiedEvent): note the order before it.
        ids = _ordered_ids(self.context)
        if ids is not None:
            _touch(self.context, ids)
        return order_objects(self, key, reverse)

    orderObjects.noticed_by_catalog_connector = True
    return orderObjects


def notice_silent_reorders() -> None:
    """Make plone.folder's ``orderObjects`` (sort by a key, or reverse) re-send the positions it
    changes, as every other reorder does through its event. Done once per process, on import."""
    for ordering in (DefaultOrdering, PartialOrdering):
        if not getattr(ordering.orderObjects, "noticed_by_catalog_connector", False):
            ordering.orderObjects = _noticing(ordering.orderObjects)


notice_silent_reorders()


def flush(tool=None):
    """Send the positions that changed; also called before a query inside the transaction."""
    txn = transaction.get()
    try:
        state = txn.data(_KEY)
    except KeyError:
        return
    if state is None or not state.containers:
        return
    containers, state.containers = state.containers, {}
    for container, before in containers.values():
        current = _ordered_ids(container)
        if current is None:
            continue
        catalog = _service_tool(container)
        if catalog is None or GOPIP not in catalog.indexes():
            continue
        old_positions = {} if before is None else {cid: i for i, cid in enumerate(before)}
        for position, cid in enumerate(current):
            if old_positions.get(cid) == position:
                continue
            child = container._getOb(cid, None)
            if child is None or not hasattr(aq_base(child), "reindexObject"):
                continue
            path = "/".join(child.getPhysicalPath())
            if created_in_this_transaction(child) and not catalog.has_full_entry(path):
                # Its queued index operation indexes every index, its position included. Sent
                # alone, the position would make a catalog entry ZCatalog has not got yet, which
                # the transaction's own searches (reindexObjectSecurity's) would then find.
                continue
            catalog.catalog_object(child, path, idxs=[GOPIP], update_metadata=0)
