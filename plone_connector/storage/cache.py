"""A process-wide cache of records, shared by all instances (ZODB Connections) of a storage.

Entries are ``oid -> (tid, record)``, and the cache keeps a *horizon*: a tid H such that no
entry's object changed between the entry's tid and H. Polls keep it true: every poll reads all
changes (oid, tid) between the instance's previous snapshot and its new one S; under the cache's
lock the changed oids are dropped and H moves to S. (The previous snapshot is never above H,
since each poll moves H at least to its own snapshot, so no change is ever skipped.)

- An instance whose snapshot S is not above H may use an entry with tid <= S without asking the
  database: the entry is current at H, hence at S. That is a load with no round trip.
- Otherwise the load asks the database for the oid's tid in its snapshot, passing the cached
  tid, and the row comes back without its state when they match (no transfer, no decoding).
- An entry may be added only by an instance whose snapshot is not below H (what it read is
  current at its snapshot, hence at H), checked under the lock.
- A poll drops an entry only if it saw a change of the object newer than the entry: an entry at
  the tid the poll reports is that revision (history-free rows hold the newest only).
- A commit of this process puts its own records at its tid T (``put_own``), only while the
  horizon is not above T: the committer held the rows' locks, so no revision newer than T exists
  yet, and the polls that later carry the horizon past T see any that comes. They are the
  records a load from the database would build (the transcoder's checked rebuild in jsonb's key
  order, or the exact copy: ``EncodedState.record``).
- A pack that deleted objects (``gc_tid`` moved) empties the cache; commits of this process
  drop their oids at ``tpc_finish`` before putting their own records.
"""

from __future__ import annotations

import threading
from collections import OrderedDict


class StateCache:
    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, tuple[int, bytes]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.horizon: int | None = None
        self.gc_tid: int | None = None
        self.hits = 0
        self.misses = 0

    def tid_of(self, zoid: int) -> int:
        """The cached tid of ``zoid``, or -1 (matches no row)."""
        entry = self._entries.get(zoid)
        return entry[0] if entry is not None else -1

    def get(self, zoid: int, tid: int) -> bytes | None:
        with self._lock:
            entry = self._entries.get(zoid)
            if entry is None or entry[0] != tid:
                self.misses += 1
                return None
            self._entries.move_to_end(zoid)
            self.hits += 1
        return entry[1]

    def _evict(self) -> None:
        while self._size > self.max_bytes and self._entries:
            _zoid, (_tid, evicted) = self._entries.popitem(last=False)
            self._size -= len(evicted)

    def current(self, zoid: int, snapshot: int) -> tuple[int, bytes] | None:
        """(tid, record) known current in ``snapshot`` without asking the database, or None."""
        with self._lock:
            horizon = self.horizon
            if horizon is None or snapshot > horizon:
                return None
            entry = self._entries.get(zoid)
            if entry is None or entry[0] > snapshot:
                return None
            self._entries.move_to_end(zoid)
            self.hits += 1
        return entry

    def advance(self, since: int, snapshot: int, changed: list[int], tids: list[int], gc_tid: int) -> None:
        """A poll saw ``changed`` oids committed in (since, snapshot], at ``tids``."""
        newest: dict[int, int] = {}
        for zoid, tid in zip(changed, tids, strict=True):
            if tid > newest.get(zoid, -1):
                newest[zoid] = tid
        with self._lock:
            if self.gc_tid is not None and gc_tid != self.gc_tid:
                # Objects were deleted: nothing cached may predate this snapshot. Empty, the
                # cache holds the horizon trivially; moved to the snapshot, it makes put and
                # put_own refuse records read or written before the deletion (which no poll
                # would report), even when this poll's ``since`` is above the horizon.
                self._entries.clear()
                self._size = 0
                if self.horizon is not None:
                    self.horizon = max(self.horizon, snapshot)
            self.gc_tid = gc_tid
            for zoid, tid in newest.items():
                entry = self._entries.get(zoid)
                if entry is not None and entry[0] < tid:
                    del self._entries[zoid]
                    self._size -= len(entry[1])
            if self.horizon is None:
                if not self._entries:
                    self.horizon = snapshot
            elif since <= self.horizon:
                self.horizon = max(self.horizon, snapshot)

    def drop(self, zoids) -> None:
        with self._lock:
            for zoid in zoids:
                entry = self._entries.pop(zoid, None)
                if entry is not None:
                    self._size -= len(entry[1])

    def put(self, zoid: int, tid: int, record: bytes, snapshot: int | None = None) -> None:
        if self.max_bytes <= 0:
            return
        with self._lock:
            if self.horizon is None or snapshot is None or snapshot < self.horizon:
                return  # a change after our snapshot may already have been dropped
            self._insert(zoid, tid, record)
            self._evict()

    def put_own(self, tid: int, records: list[tuple[int, bytes]]) -> bool:
        """Records this process committed at ``tid``; refused (False) once the horizon is past it."""
        if self.max_bytes <= 0:
            return False
        with self._lock:
            if self.horizon is None or self.horizon > tid:
                return False
            for zoid, record in records:
                self._insert(zoid, tid, record)
            self._evict()
            return True

    def _insert(self, zoid: int, tid: int, record: bytes) -> None:
        """Under the lock: the record at ``tid``, unless it is too big or a newer one is cached."""
        if len(record) > self.max_bytes // 8:
            return
        old = self._entries.get(zoid)
        if old is not None:
            if old[0] > tid:
                return  # keep the newer revision
            self._size -= len(old[1])
        self._entries[zoid] = (tid, record)
        self._entries.move_to_end(zoid)
        self._size += len(record)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._size = 0
            self.horizon = None
            self.gc_tid = None
