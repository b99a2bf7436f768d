"""Planner statistics of the catalogs' partitions, kept current by the service itself.

Every plan the service sends depends on the partition's statistics: with none (a catalog that was
just created and filled by a Plone site's first commits), PostgreSQL takes each index value to
match a handful of rows, sorts every match of a page's query instead of walking an index and
stopping after the page, and reads whole rows for it. Autovacuum analyzes a table once 50 rows
plus 10% of it changed, but only when it is on, and up to its naptime (a minute) later; a catalog
filled in that minute is planned blind until then (a Plone site of 500 documents, autovacuum off:
its folder-listing query read 1,000 rows for 20 and took 10 ms, 1.1 ms after ANALYZE).

So the service counts the rows its commits write per catalog and analyzes the partition (and, at
most once a pause, the text statistics tables every catalog shares) in the background once as many changed as would make autovacuum do
it, at most once per ``pause`` seconds per catalog; a threshold passed during the pause is served
when it ends. A catalog this process has not analyzed yet is judged by its estimate
(pg_class.reltuples), so that a restart does not analyze every large catalog after 50 rows. Counting
is per process: with several workers each analyzes after its own share,
which only makes it sooner. A failed ANALYZE is logged and left to the next commit or to
autovacuum: statistics change plans, never answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import asyncpg

from .catalogs import ANALYZE_TEXT, Catalog

log = logging.getLogger(__name__)


@dataclass
class _State:
    changed: int = 0
    # The partition's row estimate (pg_class.reltuples) after this process's last ANALYZE of it;
    # None until one ran (then the threshold is min_rows alone: a new catalog is analyzed soon).
    rows: float | None = None
    last: float = float("-inf")
    # Whether the partition's estimate was read once (a catalog analyzed before this process
    # started waits for 10% of its rows, not for its first 50).
    known: bool = False
    task: asyncio.Task | None = field(default=None, repr=False)


class StatisticsUpkeep:
    """``pause`` 0: never analyze (Settings.analyze_pause)."""

    def __init__(self, db, min_rows: int = 50, fraction: float = 0.1, pause: float = 30.0):
        self.db = db
        self.min_rows = min_rows
        self.fraction = fraction
        self.pause = pause
        self._states: dict[int, _State] = {}
        # The text statistics tables are shared by every catalog: analyzed at most once a pause.
        self._text_last = float("-inf")
        self.analyzed = 0  # ANALYZE runs done (for tests and metrics)

    def threshold(self, state: _State) -> float:
        return self.min_rows + self.fraction * max(state.rows or 0.0, 0.0)

    def written(self, catalog: Catalog, rows: int) -> None:
        """A commit wrote (or removed) ``rows`` rows of ``catalog``; call after it committed."""
        if rows <= 0 or not self.pause:
            return
        state = self._states.setdefault(catalog.id, _State())
        state.changed += rows
        if state.task is None and state.changed >= self.threshold(state):
            state.task = asyncio.get_running_loop().create_task(self._analyze(catalog, state))

    async def _analyze(self, catalog: Catalog, state: _State) -> None:
        ran = False
        try:
            wait = state.last + self.pause - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            changed = state.changed
            async with self.db.acquire() as conn:
                if not state.known:
                    state.known = True
                    state.rows = await _estimate(conn, catalog)
                    if state.changed < self.threshold(state):
                        return
                ran = True
                await conn.execute(f"analyze {catalog.table}")
                if time.monotonic() - self._text_last >= self.pause:
                    self._text_last = time.monotonic()
                    await conn.execute(ANALYZE_TEXT)
                state.rows = await _estimate(conn, catalog)
            state.changed -= changed  # what was written while it ran counts towards the next one
            self.analyzed += 1
        except asyncio.CancelledError:
            raise
        except asyncpg.UndefinedTableError:
            pass  # the catalog was dropped meanwhile
        except Exception:  # a lost connection, a timeout: the next commit tries again
            log.warning("ANALYZE of catalog %s failed", catalog.name, exc_info=True)
        finally:
            if ran:  # the pause runs from an ANALYZE tried, not from an estimate read
                state.last = time.monotonic()
            state.task = None

    async def close(self) -> None:
        tasks = [s.task for s in self._states.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _estimate(conn, catalog: Catalog) -> float:
    """The partition's row estimate; negative while it was never analyzed."""
    return await conn.fetchval("select reltuples from pg_class where oid = $1::regclass", catalog.table)
