"""Which catalog batch a ZODB snapshot's catalog counter stands for, and waiting for it.

The service commits a transaction's batch at ``tpc_finish``, after the ZODB storages. In between,
another process can already see the transaction's new counter; if it cached the service's older
answer under that counter, it would keep serving it until the next change. So the transaction that
bumps the counter also records its batch id (``CatalogBatchMark``, in the same ZODB transaction),
queries send it as ``after_batch``, and an answer that does not include it yet
(``complete: false``) is waited for briefly and never cached.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

from persistent import Persistent

logger = logging.getLogger("plone_connector.catalog")

# Ids kept when concurrent transactions' marks are merged (more is a burst of writers; the oldest
# are committed long since).
MAX_MARKED = 16
# Pauses between attempts while an answer is incomplete: about 1 s in all.
WAIT_STEPS = (0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.4)
# After a batch was waited for in vain (its commit failed, or its process died between ZODB's
# commit and the service's), later queries do not wait for it again for this long.
GIVE_UP_SECONDS = 30.0


class CatalogBatchMark(Persistent):
    """The batch ids of the transaction(s) that last changed the catalog, kept beside the counter."""

    def __init__(self):
        self.ids: tuple[str, ...] = ()

    def record(self, batch_id: str) -> None:
        if self.ids != (batch_id,):
            self.ids = (batch_id,)

    def _p_resolveConflict(self, old, committed, new):
        # Two transactions changed the catalog at once (their counter increments merge too): a
        # reader of the merged state must wait for both batches.
        merged = list(dict.fromkeys(tuple(committed.get("ids", ())) + tuple(new.get("ids", ()))))
        resolved = dict(new)
        resolved["ids"] = tuple(merged[-MAX_MARKED:])
        return resolved


class BatchWatch:
    """Per process: batches known committed (no need to name them again), and those given up on."""

    def __init__(self, size: int = 1000):
        self.size = size
        self._committed: OrderedDict[str, None] = OrderedDict()
        self._given_up: dict[str, float] = {}
        self._lock = threading.Lock()
        self.incomplete_answers = 0
        self.waits = 0

    def pending(self, ids) -> list[str]:
        with self._lock:
            return [i for i in ids if i not in self._committed]

    def committed(self, batch_id: str) -> None:
        with self._lock:
            self._committed[batch_id] = None
            self._committed.move_to_end(batch_id)
            while len(self._committed) > self.size:
                self._committed.popitem(last=False)
            self._given_up.pop(batch_id, None)

    def may_wait(self, batch_id: str) -> bool:
        with self._lock:
            since = self._given_up.get(batch_id)
            return since is None or time.monotonic() - since > GIVE_UP_SECONDS

    def give_up(self, batch_id: str) -> None:
        with self._lock:
            self._given_up[batch_id] = time.monotonic()
            self.incomplete_answers += 1

    def clear(self) -> None:
        with self._lock:
            self._committed.clear()
            self._given_up.clear()
            self.incomplete_answers = self.waits = 0


batch_watch = BatchWatch()


def until_complete(send, batch_id: str, catalog_id: str):
    """``send(batch_id)`` until its answer includes the batch, for about a second at most.

    Returns the last answer; an incomplete one is logged (the caller must not cache it).
    """
    result = send(batch_id)
    if result.complete:
        batch_watch.committed(batch_id)
        return result
    if not batch_watch.may_wait(batch_id):
        # Given up on recently (and said so): answer at once, still uncached.
        batch_watch.incomplete_answers += 1
        return result
    for pause in WAIT_STEPS:
        batch_watch.waits += 1
        time.sleep(pause)
        result = send(batch_id)
        if result.complete:
            batch_watch.committed(batch_id)
            return result
    batch_watch.give_up(batch_id)
    logger.warning(
        "catalog %s: batch %s, committed in ZODB, is not committed in the catalog service yet; "
        "answering from the older catalog state (not cached)", catalog_id, batch_id,
    )
    return result
