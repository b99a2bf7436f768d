"""The per-process query cache, and the per-transaction memo of answers that saw staged changes.

Keyed on the catalog, the catalog counter as this transaction's ZODB snapshot sees it, the
principals and the query. The counter is bumped in the ZODB transaction that carries a batch, so a
transaction never gets answers older than the data it sees, and a new counter value simply misses.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import transaction

from . import stats
from .settings import ConnectorSettings


class QueryCache:
    def __init__(self, size: int = 2000):
        self.size = size
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            value = self._entries.get(key)
            if value is None:
                self.misses += 1
                stats.cache_lookup(hit=False)
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            stats.cache_lookup(hit=True)
            return value

    def put(self, key, value) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def stats(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "hit_rate": self.hit_rate, "entries": len(self._entries)}


query_cache = QueryCache(ConnectorSettings.from_environ().cache_size)


# Answers one transaction keeps at most.
MEMO_SIZE = 500


class TransactionMemo:
    """Answers this transaction got from the service while it had pending (staged) changes.

    The process cache cannot hold those: they depend on the transaction's own staged batch. Kept in
    the transaction's data, so it goes when the transaction ends. Keys carry the staged batch ids
    and ``changes``, which the tool bumps whenever the batch changed since it was last staged, so a
    catalog change (or a savepoint rollback) in between is never answered from here.
    """

    def __init__(self):
        self.changes = 0
        self._entries: dict = {}

    def get(self, key):
        value = self._entries.get(key)
        with _memo_lock:
            memo_totals["hits" if value is not None else "misses"] += 1
        stats.memo_lookup(hit=value is not None)
        return value

    def put(self, key, value) -> None:
        if len(self._entries) >= MEMO_SIZE:
            # A long transaction (a script) asking many different queries: forget the oldest.
            self._entries.pop(next(iter(self._entries)))
        self._entries[key] = value

    def changed(self) -> None:
        self.changes += 1
        self._entries.clear()  # nothing older can be asked for again


# Transaction data key of the memo; per process, the lookups of all transactions.
_MEMO_KEY = object()
_memo_lock = threading.Lock()
memo_totals = {"hits": 0, "misses": 0}


def transaction_memo() -> TransactionMemo:
    txn = transaction.get()
    try:
        return txn.data(_MEMO_KEY)
    except KeyError:
        memo = TransactionMemo()
        txn.set_data(_MEMO_KEY, memo)
        return memo


def memo_stats() -> dict:
    with _memo_lock:
        hits, misses = memo_totals["hits"], memo_totals["misses"]
    total = hits + misses
    return {"hits": hits, "misses": misses, "hit_rate": hits / total if total else 0.0}


def reset_memo_stats() -> None:
    with _memo_lock:
        memo_totals["hits"] = memo_totals["misses"] = 0
