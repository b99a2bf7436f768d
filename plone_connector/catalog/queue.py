"""CMFCore's indexing queue, kept out of ZODB during the second phase of the commit.

CMFCore joins every transaction that queued an indexing operation with a ``QueueTM``. Its sort key
(``str(id(self))``, digits) puts it before the ZODB connection, and its ``tpc_finish`` (and
``tpc_abort``) look the queue processors up again:
``getSiteManager().getUtilitiesFor(IIndexQueueProcessor)``. That loads the site manager if it is a
ghost. ``Connection.commit`` ends with a savepoint whose cache collection turns the transaction's
own new objects into ghosts when it touched more objects than the cache holds, and from then on
they can only be loaded once the storage has finished. So a transaction that created the site
manager (site creation, a distribution importing its content) and touched more than ``cache-size``
objects failed in the second phase, after every storage voted: POSKeyError on JsonbStorage and
RelStorage, ReadConflictError on FileStorage; stock Plone at a small enough cache as well, the
connector's install (it rebuilds the catalog in the same transaction) already at 400.

Here the processors are resolved in the queue's before-commit hook, the last moment at which
every object of the transaction can be loaded, and the second phase calls them without touching
ZODB. Nothing else changes: the same processors, called the same number of times.
"""

from __future__ import annotations

from Products.CMFCore import indexing
from Products.CMFCore.interfaces import IIndexQueueProcessor
from zope.component import getSiteManager

_RESOLVED = "_plone_connector_processors"


def _processors() -> list:
    return [util for _name, util in getSiteManager().getUtilitiesFor(IIndexQueueProcessor)]


def _take_resolved(tm) -> list | None:
    processors = getattr(tm, _RESOLVED, None)
    if processors is not None:
        setattr(tm, _RESOLVED, None)
    return processors


def before_commit(self):
    self.queue.process()
    self.queue.clear()
    setattr(self, _RESOLVED, _processors())


def tpc_finish(self, transaction):
    processors = _take_resolved(self)
    if processors is None:  # joined after the before-commit hooks ran: CMFCore's own way
        self.queue.commit()
    else:
        for util in processors:
            util.commit()
    self.registered = False


def tpc_abort(self, transaction):
    processors = _take_resolved(self)
    if processors is None:  # aborted before the commit began, when ZODB can load everything
        self.queue.abort()
    else:
        for util in processors:
            util.abort()
    self.queue.clear()
    self.registered = False


def apply() -> None:
    """Replace QueueTM's commit methods (idempotent); done when the connector's package loads."""
    tm = indexing.QueueTM
    tm.before_commit = before_commit
    tm.tpc_finish = tpc_finish
    tm.tpc_abort = tm.abort = tpc_abort
