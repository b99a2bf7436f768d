"""/catalogs/{id}/batches: index batches, one-shot or two-phase."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response

from catalog_schemas.api import (
    NO_NUL_PATTERN,
    Batch,
    BatchAppend,
    BatchResolver,
    BatchResult,
    StagedBatch,
    StagedBatches,
)

from ..indexes.dateindex import DateRecurringIndex
from ..metrics import BATCH_ENTRIES, BATCHES
from ..store import batches
from ..store.catalogs import Catalog
from .auth import identify, require_trusted
from .deps import HEADERS, body_schema, credential_of, idempotent, read_body
from .problems import CATALOG_ERRORS, errors

router = APIRouter(prefix="/catalogs/{name}/batches", tags=["indexing"],
                   responses=errors(400, *CATALOG_ERRORS, 409, 413))


async def with_lsn(db, result: BatchResult) -> BatchResult:
    """Add the WAL position a replica must reach before it may answer this client again."""
    if not db.replicas:
        return result
    async with db.acquire() as conn:
        result.lsn = str(await conn.fetchval("select pg_current_wal_lsn()"))
    return result


def bulk_of(settings) -> batches.Bulk:
    return batches.Bulk(settings.bulk_commit_entries, settings.bulk_statement_timeout, settings.index_build_memory)


def _answer(result: BatchResult) -> Response:
    return Response(result.model_dump_json(), media_type="application/json")


async def _writable(conn, request: Request, name: str) -> tuple[Catalog, int]:
    """The catalog and its counter, on the request's own connection, if the caller may write."""
    state = request.app.state
    catalog, counter = await state.registry.get(conn, name)
    require_trusted(identify(credential_of(request.headers), catalog, state.settings.admin_token))
    return catalog, counter


# The batch routes are on every Plone transaction's path (stage at vote, commit at finish): like the
# searches, they read their body and headers themselves and use one pooled connection per request.
@router.post("", response_model=BatchResult, openapi_extra={**body_schema(Batch), **HEADERS})
@idempotent
async def post_batch(name: str, request: Request, stage: bool = Query(default=False)):
    """Stage a batch (``stage=true``) or apply and commit it at once."""
    state = request.app.state
    batch = await read_body(request, Batch)
    async with state.db.acquire() as conn:
        catalog, counter = await _writable(conn, request, name)
        batches.check_batch(batch)
        changes = await _converted(catalog, batch, state.settings.max_batch_entries)
        BATCH_ENTRIES.labels(name, "staged" if stage else "committed").inc(len(changes))
        async with conn.transaction():
            if stage:
                found = await batches.stage(conn, catalog, batch, changes)
                if found != "committed":
                    BATCHES.labels(name, "staged").inc()
                    return _answer(BatchResult(batch_id=batch.batch_id, state="staged", applied=0, counter=counter))
                result = await batches.commit(conn, catalog, batch.batch_id)
            else:
                result = await batches.apply_one_shot(conn, catalog, batch, changes)
    state.upkeep.written(catalog, result.applied)
    BATCHES.labels(name, "committed").inc()
    return _answer(await with_lsn(state.db, result))


@router.post("/{batch_id}/append", response_model=BatchResult, openapi_extra={**body_schema(BatchAppend), **HEADERS})
@idempotent
async def append_batch(name: str, request: Request, batch_id: str = Path(pattern=NO_NUL_PATTERN)):
    """Add entries to a staged batch: each replaces the batch's entry for its uid."""
    state = request.app.state
    body = await read_body(request, BatchAppend)
    async with state.db.acquire() as conn:
        catalog, counter = await _writable(conn, request, name)
        changes = await _converted(catalog, body, state.settings.max_batch_entries)
        BATCH_ENTRIES.labels(name, "staged").inc(len(changes))
        async with conn.transaction():
            await batches.append(conn, catalog, batch_id, changes, state.settings.max_staged_entries)
    return _answer(BatchResult(batch_id=batch_id, state="staged", applied=0, counter=counter))


# Entries converted on the event loop: a few entries of plain values take well under a millisecond.
INLINE_ENTRIES = 20


async def _converted(catalog: Catalog, batch: Batch | BatchAppend, max_entries: int) -> list[batches.Change]:
    if len(batch.entries) <= INLINE_ENTRIES and not any(_recurring(catalog, e) for e in batch.entries):
        return batches.convert(batch, catalog, max_entries)
    # In a thread: converting thousands of entries (text splitting, recurrence expansion) would
    # hold the event loop, and every query of this worker with it.
    return await asyncio.to_thread(batches.convert, batch, catalog, max_entries)


def _recurring(catalog: Catalog, entry) -> bool:
    """Does the entry carry a value for a DateRecurringIndex (whose expansion can take a while)?"""
    values = getattr(entry, "values", None) or {}
    return any(isinstance(catalog.schema.indexes.get(name), DateRecurringIndex) for name in values)


async def _settle(request: Request, name: str, batch_id: str, outcome: str) -> Response:
    """Commit or abort a staged batch, in one transaction on the request's connection."""
    db = request.app.state.db
    async with db.acquire() as conn:
        catalog, _ = await _writable(conn, request, name)
        async with conn.transaction():
            if outcome == "committed":
                result = await batches.commit(conn, catalog, batch_id, bulk=bulk_of(request.app.state.settings))
            else:
                result = await batches.abort(conn, catalog, batch_id)
    if outcome == "committed":
        request.app.state.upkeep.written(catalog, result.applied)
    BATCHES.labels(name, outcome).inc()
    return _answer(await with_lsn(db, result) if outcome == "committed" else result)


@router.post("/{batch_id}/commit", response_model=BatchResult, openapi_extra=HEADERS)
@idempotent
async def commit_batch(name: str, request: Request, batch_id: str = Path(pattern=NO_NUL_PATTERN)):
    return await _settle(request, name, batch_id, "committed")


@router.post("/{batch_id}/abort", response_model=BatchResult, openapi_extra=HEADERS)
@idempotent
async def abort_batch(name: str, request: Request, batch_id: str = Path(pattern=NO_NUL_PATTERN)):
    return await _settle(request, name, batch_id, "aborted")


# Resolution of batches left staged by crashed clients (docs/decisions/0011): a client that reads
# the outcome of its transactions itself lists its expired batches and commits or aborts them.
# ``older_than`` at most a century: PostgreSQL's intervals and timestamps overflow not far beyond.
MAX_AGE = 100 * 365.25 * 86400


@router.get("/staged", response_model=StagedBatches, openapi_extra=HEADERS)
@idempotent
async def list_staged(name: str, request: Request, older_than: float = Query(default=0.0, ge=0.0, le=MAX_AGE),
                      limit: int = Query(default=100, ge=1, le=1000)):
    """The catalog's batches staged more than ``older_than`` seconds ago, oldest first."""
    async with request.app.state.db.acquire() as conn:
        catalog, _ = await _writable(conn, request, name)
        found = await batches.staged_older_than(conn, catalog, older_than, limit)
    return StagedBatches(batches=[StagedBatch(batch_id=batch_id, age=age) for batch_id, age in found])


@router.get("/resolver", response_model=BatchResolver, openapi_extra=HEADERS)
@idempotent
async def get_resolver(name: str, request: Request):
    async with request.app.state.db.acquire() as conn:
        catalog, _ = await _writable(conn, request, name)
        return BatchResolver(by=await batches.resolver_of(conn, catalog))


@router.put("/resolver", response_model=BatchResolver, openapi_extra=HEADERS)
@idempotent
async def put_resolver(name: str, resolver: BatchResolver, request: Request):
    """Declare who resolves the catalog's batches left staged by a crash."""
    async with request.app.state.db.acquire() as conn:
        catalog, _ = await _writable(conn, request, name)
        await batches.declare_resolver(conn, catalog, resolver.by == "client")
    return resolver
