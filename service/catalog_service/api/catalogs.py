"""/catalogs: create, inspect, change the schema of, clear and drop catalogs."""

from __future__ import annotations

import contextlib
import hmac
import logging
import time

import orjson
from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import ValidationError

from catalog_schemas.api import (
    NO_NUL_PATTERN,
    Batch,
    CatalogCreate,
    CatalogInfo,
    CatalogSettings,
    SchemaUpdate,
    TextIndexSize,
    TokenRequest,
    UniqueValues,
    VerifyRequest,
)

from ..errors import BadRequest, Conflict, NotFound
from ..indexes.simple import DateRangeIndex
from ..indexes.text import CELLS_SUFFIX, ZCTextIndex
from ..planner.plan import rows_source
from ..planner.sql import Params
from ..store import batches
from ..store.catalogs import Catalog, build_indexes, defer_indexes, missing_indexes, plain_name
from ..store.keys import KEY_PREFIX, catalog_of_key
from .auth import (
    TOKEN_PREFIX,
    Caller,
    Credential,
    identify,
    mint_token,
    require_admin,
    require_trusted,
    signed_token_catalog,
)
from .deps import body_schema, credential, idempotent, json_response, read_body
from .problems import CATALOG_ERRORS, errors

log = logging.getLogger(__name__)
router = APIRouter(prefix="/catalogs", tags=["catalogs"], responses=errors(*CATALOG_ERRORS))


async def info(conn, catalog: Catalog, counter: int, registry) -> CatalogInfo:
    return CatalogInfo(id=catalog.name, title=catalog.title, indexes=list(catalog.declarations),
                       metadata=list(catalog.metadata), counter=counter,
                       objects=await registry.count(conn, catalog), settings=catalog.settings)


async def trusted_catalog(request: Request, name: str, cred: Credential):
    """Open a connection, load the catalog and check the caller may change it."""
    state = request.app.state
    async with state.db.acquire() as conn:
        catalog, counter = await state.registry.get(conn, name)
    require_trusted(identify(cred, catalog, state.settings.admin_token))
    return catalog, counter


async def caller_anywhere(conn, request: Request, cred: Credential, name: str | None = None) -> Caller:
    """The caller of a route that is no one catalog's (creating, dropping catalogs): the admin, or
    the connector or a frontend of the catalog its token belongs to (``name``'s, or any), so that
    a valid catalog credential gets 403 and only an unknown one 401."""
    state = request.app.state
    admin_token = state.settings.admin_token
    if cred.malformed or not cred.bearer or (admin_token and hmac.compare_digest(cred.bearer.encode(),
                                                                                  admin_token.encode())):
        return identify(cred, None, admin_token)
    catalog = None
    owner = None
    if cred.bearer.startswith(KEY_PREFIX):
        owner = await catalog_of_key(conn, cred.bearer)
    elif cred.bearer.startswith(TOKEN_PREFIX):
        owner = signed_token_catalog(cred.bearer)
    if owner is not None:
        with contextlib.suppress(NotFound):
            catalog, _ = await state.registry.get(conn, owner)
    elif name is not None and not cred.bearer.startswith((TOKEN_PREFIX, KEY_PREFIX)):
        with contextlib.suppress(NotFound):
            catalog, _ = await state.registry.get(conn, name)
        if catalog is not None and not catalog.token_matches(cred.bearer):
            catalog = None
    if catalog is None:
        catalog = await state.registry.by_token(conn, cred.bearer)
    return identify(cred, catalog, admin_token)


@router.post("", status_code=201, responses=errors(400, 409, 413))
async def create_catalog(spec: CatalogCreate, request: Request, cred: Credential = Depends(credential)):
    """Create a catalog (admin); the answer carries its connector token, shown this once. The
    connector of an existing catalog gets 409 for it, as the admin does (the connector then
    updates its schema: installing with a catalog token works)."""
    state = request.app.state
    async with state.db.acquire() as conn:
        caller = await caller_anywhere(conn, request, cred, spec.id)
        if caller.kind == "connector" and caller.catalog == spec.id:
            raise Conflict(f"catalog {spec.id!r} exists")
        require_admin(caller)
        catalog, token = await state.registry.create(conn, spec)
        body = (await info(conn, catalog, 0, state.registry)).model_dump()
    body["token"] = token
    return json_response(body, status_code=201)


@router.post("/{name}/token")
async def rotate_catalog_token(name: str, request: Request, cred: Credential = Depends(credential),
                               grace: float = Query(default=3600.0, ge=0, le=30 * 86400)):
    """Issue the catalog a new connector token (admin, or the catalog's connector). The token it
    replaces, and the signed tokens minted with it, stay valid for ``grace`` seconds (0: not at
    all), time to configure the new one everywhere. The new token is shown this once."""
    state = request.app.state
    async with state.db.acquire() as conn:
        catalog, _ = await state.registry.get(conn, name)
        require_trusted(identify(cred, catalog, state.settings.admin_token))
        _, token, until = await state.registry.rotate_token(conn, catalog, grace)
    return json_response({"id": name, "token": token,
                          "previous_valid_until": until.isoformat() if until else None})


@router.get("/{name}", response_model=CatalogInfo)
@idempotent
async def get_catalog(name: str, request: Request, cred: Credential = Depends(credential)):
    catalog, counter = await trusted_catalog(request, name, cred)
    async with request.app.state.db.acquire() as conn:
        return await info(conn, catalog, counter, request.app.state.registry)


@router.patch("/{name}/schema", response_model=CatalogInfo, responses=errors(400, 409, 413))
@idempotent
async def update_schema(name: str, update: SchemaUpdate, request: Request, cred: Credential = Depends(credential)):
    catalog, counter = await trusted_catalog(request, name, cred)
    state = request.app.state
    async with state.db.acquire() as conn:
        catalog = await state.registry.update_schema(conn, catalog, update)
        return await info(conn, catalog, counter, state.registry)


@router.get("/{name}/settings", response_model=CatalogSettings)
async def get_settings(name: str, request: Request, cred: Credential = Depends(credential)):
    catalog, _ = await trusted_catalog(request, name, cred)
    return catalog.settings


@router.patch("/{name}/settings", response_model=CatalogSettings, responses=errors(400, 413))
async def update_settings(name: str, body: dict, request: Request, cred: Credential = Depends(credential)):
    """Change the settings the body names (CatalogSettings' fields; null resets one)."""
    catalog, _ = await trusted_catalog(request, name, cred)
    unknown = sorted(set(body) - set(CatalogSettings.model_fields))
    if unknown:
        raise BadRequest(f"unknown settings {unknown}; valid: {sorted(CatalogSettings.model_fields)}")
    changes = {k: v for k, v in body.items() if v is not None}
    resets = [k for k, v in body.items() if v is None]
    async with request.app.state.db.acquire() as conn:
        try:
            updated = await request.app.state.registry.update_settings(conn, catalog, changes, tuple(resets))
        except ValidationError as exc:
            raise BadRequest("invalid settings", errors=[
                {"loc": [str(p) for p in e["loc"]], "msg": e["msg"]} for e in exc.errors()[:20]]) from exc
    return updated.settings


@router.post("/{name}/clear", status_code=200)
async def clear_catalog(name: str, request: Request, cred: Credential = Depends(credential)):
    catalog, _ = await trusted_catalog(request, name, cred)
    async with request.app.state.db.acquire() as conn:
        counter = await request.app.state.registry.clear(conn, catalog)
    return {"id": name, "counter": counter, "objects": 0}


@router.post("/{name}/indexes/defer")
@idempotent
async def defer_catalog_indexes(name: str, request: Request, cred: Credential = Depends(credential)):
    """Drop the catalog's secondary SQL indexes for a bulk load (docs/decisions/0010). Queries stay
    correct and become scans until ``/indexes/build``."""
    catalog, _ = await trusted_catalog(request, name, cred)
    async with request.app.state.db.acquire() as conn:
        dropped = await defer_indexes(conn, catalog)
    return {"id": name, "deferred": dropped}


@router.post("/{name}/indexes/build")
@idempotent
async def build_catalog_indexes(name: str, request: Request, cred: Credential = Depends(credential)):
    """Build every secondary index the catalog lacks (after a bulk load), then ANALYZE it. Batch
    commits wait while an index builds; queries go on. Answers when done."""
    catalog, _ = await trusted_catalog(request, name, cred)
    state = request.app.state
    began = time.monotonic()
    built = await build_indexes(state.db.primary, catalog, builders=state.settings.index_builders,
                                memory=state.settings.index_build_memory, progress=log.info)
    return {"id": name, "built": built, "seconds": round(time.monotonic() - began, 3)}


@router.get("/{name}/indexes/missing")
@idempotent
async def missing_catalog_indexes(name: str, request: Request, cred: Credential = Depends(credential)):
    """The secondary SQL indexes the catalog's partition lacks (deferred, or not built yet)."""
    catalog, _ = await trusted_catalog(request, name, cred)
    async with request.app.state.db.acquire() as conn:
        return {"id": name, "missing": [plain_name(n) for _, n, _ in await missing_indexes(conn, catalog)]}


@router.delete("/{name}", status_code=204)
async def drop_catalog(name: str, request: Request, cred: Credential = Depends(credential)):
    state = request.app.state
    async with state.db.acquire() as conn:
        require_admin(await caller_anywhere(conn, request, cred, name))
        catalog, _ = await state.registry.get(conn, name)
        await state.registry.drop(conn, catalog)
    return Response(status_code=204)


@router.post("/{name}/tokens", responses=errors(400, 413))
@idempotent
async def create_token(name: str, body: TokenRequest, request: Request, cred: Credential = Depends(credential)):
    """Mint a signed, expiring token for a frontend acting for one user."""
    catalog, _ = await trusted_catalog(request, name, cred)
    return {"token": mint_token(catalog, body.principals, body.ttl, body.show_inactive), "ttl": body.ttl}


@router.get("/{name}/unique/{index}", response_model=UniqueValues, responses=errors(400))
@idempotent
async def unique_values(name: str, index: str, request: Request, cred: Credential = Depends(credential),
                        lengths: bool = False, batch_id: list[str] = Query(default=[], max_length=16),
                        attribute: str | None = None):
    """The index's distinct values (ZCatalog's ``uniqueValues``), as the catalog stands or as the
    caller's staged batches (``batch_id``, its own transaction) leave it; with ``lengths``, how
    many objects hold each value and how many the index holds (``numObjects``). ``attribute``: a
    DateRangeIndex's values of its since or until attribute (``uniqueValues(name=attribute)``)."""
    catalog, _ = await trusted_catalog(request, name, cred)
    idx = catalog.schema.indexes.get(index)
    params = Params()
    source = rows_source(catalog.schema, batch_id, params)
    if attribute is not None and idx is not None:
        if not isinstance(idx, DateRangeIndex):
            raise BadRequest(f"index {index!r}: only a DateRangeIndex lists values per attribute")
        sql = idx.bound_values_sql(source, attribute)
    else:
        sql = idx.unique_values_sql(source) if idx is not None else None
    if sql is None:
        raise NotFound(f"index {index!r} has no unique values")
    if lengths:
        # One statement, so the counts and the values come from one snapshot; the left join keeps
        # the count when there are no values (a DateRangeIndex holds every object, and no value).
        sql = (f"select h.holders, u.* from ({idx.holders_sql(source)}) h(holders) "
               f"left join ({sql}) u on true order by u.sortkey")
    async with request.app.state.db.acquire() as conn:
        rows = await conn.fetch(sql, *params.values)
    if not lengths:
        return UniqueValues(index=index, values=[orjson.loads(r["value"]) for r in rows])
    found = [r for r in rows if r["objects"] is not None]
    return UniqueValues(index=index, values=[orjson.loads(r["value"]) for r in found],
                        lengths=[r["objects"] for r in found], objects=rows[0]["holders"])


@router.get("/{name}/words/{index}", response_model=TextIndexSize)
@idempotent
async def text_index_size(name: str, index: str, request: Request, cred: Credential = Depends(credential),
                          batch_id: list[str] = Query(default=[], max_length=16)):
    """A ZCTextIndex's distinct words and documents (ZCatalog's ``numObjects`` and ``indexSize``;
    it has no unique values), seeing staged batches as ``/unique`` does."""
    catalog, _ = await trusted_catalog(request, name, cred)
    idx = catalog.schema.indexes.get(index)
    if not isinstance(idx, ZCTextIndex):
        raise NotFound(f"index {index!r} is no ZCTextIndex")
    params = Params()
    source = rows_source(catalog.schema, batch_id, params)
    # Counted from the rows, not from the lexicon table, which staged batches do not change.
    sql = (f"select (select count(*) from {source} o where {idx.has_value}) as documents, "
           f"(select count(distinct w) from {source} o, jsonb_array_elements_text({idx.json}) w "
           f"where {idx.has_value}) as words")
    async with request.app.state.db.acquire() as conn:
        row = await conn.fetchrow(sql, *params.values)
    return TextIndexSize(index=index, words=row["words"], documents=row["documents"])


@router.get("/{name}/objects/{uid:path}")
@idempotent
async def object_data(name: str, request: Request, uid: str = Path(pattern=NO_NUL_PATTERN),
                      cred: Credential = Depends(credential)):
    catalog, _ = await trusted_catalog(request, name, cred)
    async with request.app.state.db.acquire() as conn:
        row = await conn.fetchrow(
            f"select rid, uid, path, (idx || text)::text as idx, meta::text as meta, version from {catalog.table} "
            f"where uid = $1", uid)
    if row is None:
        raise NotFound(f"no object {uid!r} in catalog {name!r}")
    # The text document also holds the score cells of SearchableText (docs/decisions/0007), which
    # are no index's value.
    indexes = {k: v for k, v in orjson.loads(row["idx"]).items() if not k.endswith(CELLS_SUFFIX)}
    return json_response({"rid": row["rid"], "uid": row["uid"], "path": row["path"], "version": row["version"],
                           "indexes": indexes, "metadata": orjson.loads(row["meta"])})


@router.post("/{name}/verify", openapi_extra={**body_schema(VerifyRequest)}, responses=errors(400, 413))
@idempotent
async def verify_objects(name: str, request: Request, cred: Credential = Depends(credential)):
    """Compare objects as the client sees them (index entries, as in a batch) with what the catalog
    holds, in the catalog's stored form; the answer lists, per uid, what differs."""
    body = await read_body(request, VerifyRequest)
    catalog, _ = await trusted_catalog(request, name, cred)
    batch = Batch(batch_id="verify", entries=body.entries)
    changes = batches.convert(batch, catalog, request.app.state.settings.max_batch_entries)
    async with request.app.state.db.acquire() as conn:
        return json_response({"results": await batches.compare(conn, catalog, changes)})
