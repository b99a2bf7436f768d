"""The per-process query cache.

Keyed on the catalog, the catalog counter as this transaction's ZODB snapshot sees it, the
principals and the query. The counter is bumped in the ZODB transaction that carries a batch, so a
transaction never gets answers older than the data it sees, and a new counter value simply misses.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

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
