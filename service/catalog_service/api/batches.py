"""/catalogs/{id}/batches: index batches, one-shot or two-phase."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Query, Request

from catalog_schemas.api import Batch, BatchResult

from ..metrics import BATCH_ENTRIES, BATCHES
from ..store import batches
from .auth import Credential
from .catalogs import trusted_catalog
from .deps import credential

router = APIRouter(prefix="/catalogs/{name}/batches", tags=["indexing"])


async def with_lsn(db, result: BatchResult) -> BatchResult:
    """Add the WAL position a replica must reach before it may answer this client again."""
    if not db.replicas:
        return result
    async with db.acquire() as conn:
        result.lsn = str(await conn.fetchval("select pg_current_wal_lsn()"))
    return result


@router.post("", response_model=BatchResult)
async def post_batch(name: str, batch: Batch, request: Request, stage: bool = Query(default=False),
                     cred: Credential = Depends(credential)):
    """Stage a batch (``stage=true``) or apply and commit it at once."""
    catalog, counter = await trusted_catalog(request, name, cred)
    batches.check_batch(batch)
    state = request.app.state
    # In a thread: converting thousands of entries (text splitting, recurrence expansion) would
    # hold the event loop, and every query of this worker with it.
    changes = await asyncio.to_thread(batches.convert, batch, catalog, state.settings.max_batch_entries)
    BATCH_ENTRIES.labels(name, "staged" if stage else "committed").inc(len(changes))
    async with state.db.acquire() as conn, conn.transaction():
        if stage:
            found = await batches.stage(conn, catalog, batch, changes)
            if found != "committed":
                BATCHES.labels(name, "staged").inc()
                return BatchResult(batch_id=batch.batch_id, state="staged", applied=0, counter=counter)
            result = await batches.commit(conn, catalog, batch.batch_id)
        else:
            rows = await batches.one_shot_rows(conn, catalog, batch.batch_id)
            await batches.stage(conn, catalog, batch, changes, rows)
            result = await batches.commit(conn, catalog, batch.batch_id, rows)
    BATCHES.labels(name, "committed").inc()
    return await with_lsn(state.db, result)


@router.post("/{batch_id}/commit", response_model=BatchResult)
async def commit_batch(name: str, batch_id: str, request: Request, cred: Credential = Depends(credential)):
    catalog, _ = await trusted_catalog(request, name, cred)
    async with request.app.state.db.acquire() as conn, conn.transaction():
        result = await batches.commit(conn, catalog, batch_id)
    BATCHES.labels(name, "committed").inc()
    return await with_lsn(request.app.state.db, result)


@router.post("/{batch_id}/abort", response_model=BatchResult)
async def abort_batch(name: str, batch_id: str, request: Request, cred: Credential = Depends(credential)):
    catalog, _ = await trusted_catalog(request, name, cred)
    async with request.app.state.db.acquire() as conn, conn.transaction():
        result = await batches.abort(conn, catalog, batch_id)
    BATCHES.labels(name, "aborted").inc()
    return result
