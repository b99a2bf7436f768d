"""/catalogs/{id}/keys: scoped API keys for servers and static sites (admin only).

A key is shown once, in the answer that creates it; listing shows everything else. Revoking keeps
the key listed, with the time; a revoked or expired key is refused with 401 on every route.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Depends, Path, Request

from catalog_schemas.keys import KeyCreate, KeyCreated, KeyInfo, KeyList

from ..planner.scope import check_filter
from ..store.keys import create_key, revoke_key
from .auth import Credential, identify, require_admin
from .deps import credential, json_response, limits_for
from .problems import CATALOG_ERRORS, errors

router = APIRouter(prefix="/catalogs", tags=["keys"], responses=errors(*CATALOG_ERRORS))


async def _admin_catalog(conn, request: Request, name: str, cred: Credential):
    state = request.app.state
    catalog, _ = await state.registry.get(conn, name)
    require_admin(identify(cred, catalog, state.settings.admin_token))
    return catalog


@router.post("/{name}/keys", status_code=201, response_model=KeyCreated, responses=errors(400, 413))
async def create_catalog_key(name: str, spec: KeyCreate, request: Request, cred: Credential = Depends(credential)):
    """Create a key searching ``name`` as ``principals`` (Anonymous unless given) within ``filter``;
    the answer's ``key`` is shown this once."""
    async with request.app.state.db.acquire() as conn:
        catalog = await _admin_catalog(conn, request, name, cred)
        check_filter(spec.filter, catalog.schema, limits_for(request))
        key, text = await create_key(conn, catalog, spec)
    response = json_response(KeyCreated(**key.info(name).model_dump(), key=text).model_dump(mode="json"),
                             status_code=201)
    response.headers["Cache-Control"] = "no-store"  # the secret, shown this once
    return response


@router.get("/{name}/keys", response_model=KeyList)
async def list_catalog_keys(name: str, request: Request, cred: Credential = Depends(credential)):
    """The catalog's keys, revoked and expired ones included; never their secrets."""
    async with request.app.state.db.acquire() as conn:
        catalog = await _admin_catalog(conn, request, name, cred)
    now = datetime.now(UTC)
    return KeyList(keys=[k.info(name, now) for k in catalog.keys or ()])


@router.delete("/{name}/keys/{key_id}", response_model=KeyInfo, responses=errors(404))
async def revoke_catalog_key(name: str, request: Request, key_id: str = Path(pattern=r"^[0-9a-f]{1,64}$"),
                             cred: Credential = Depends(credential)):
    """Revoke the key: from now on every search with it is 401, on every service process."""
    async with request.app.state.db.acquire() as conn:
        catalog = await _admin_catalog(conn, request, name, cred)
        key = await revoke_key(conn, catalog, key_id)
    return key.info(name)
