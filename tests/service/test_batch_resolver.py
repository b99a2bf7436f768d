"""Batches left staged by a crashed client, for catalogs whose client resolves them itself
(docs/decisions/0011): the listing and the declaration over HTTP, and the service's resolver, which
commits what catalog_txn_outcome records but leaves the rest to the client until the abandon ttl."""

from __future__ import annotations

import asyncio
import uuid

from catalog_schemas.api import Batch, CatalogCreate, IndexDeclaration
from catalog_service.store import batches
from catalog_service.store.catalogs import CatalogRegistry
from catalog_service.store.migrations import migrate
from tests.service.test_api import entry
from tests.service.test_review_support import get, new_catalog, post
from tests.service.test_store import connect, fresh_db  # noqa: F401  (a fixture, used by name)


def stage(service, name, token, batch_id):
    response = post(service, f"/catalogs/{name}/batches?stage=true", token=token,
                    json={"batch_id": batch_id, "entries": [entry(batch_id, f"/plone/{batch_id}")]})
    assert response.status_code == 200, response.text


def put(service, url, token, **kw):
    import httpx

    return httpx.put(service.url + url, headers={"Authorization": f"Bearer {token}"}, timeout=30, **kw)


def test_staged_batches_are_listed_oldest_first_for_the_catalogs_own_client(live_service):
    with live_service.client() as admin:
        name, token = new_catalog(admin)
        other, other_token = new_catalog(admin)
    first, second, committed = (uuid.uuid4().hex for _ in range(3))
    for batch_id in (first, second, committed):
        stage(live_service, name, token, batch_id)
    stage(live_service, other, other_token, uuid.uuid4().hex)
    assert post(live_service, f"/catalogs/{name}/batches/{committed}/commit", token=token).status_code == 200

    listed = get(live_service, f"/catalogs/{name}/batches/staged", token=token)
    assert listed.status_code == 200, listed.text
    assert [b["batch_id"] for b in listed.json()["batches"]] == [first, second]
    assert all(b["age"] >= 0 for b in listed.json()["batches"])
    assert get(live_service, f"/catalogs/{name}/batches/staged", token=token,
               params={"older_than": 3600}).json() == {"batches": []}
    limited = get(live_service, f"/catalogs/{name}/batches/staged", token=token, params={"limit": 1})
    assert [b["batch_id"] for b in limited.json()["batches"]] == [first]
    for params in ({"older_than": -1}, {"older_than": "inf"}, {"older_than": 1e300}, {"limit": 0}, {"limit": 1001}):
        refused = get(live_service, f"/catalogs/{name}/batches/staged", token=token, params=params)
        assert refused.status_code == 422, refused.text
    # Another catalog's token, and no token, get nothing.
    assert get(live_service, f"/catalogs/{name}/batches/staged", token=other_token).status_code in (401, 403)
    assert get(live_service, f"/catalogs/{name}/batches/staged", token=False).status_code in (401, 403)


def test_the_client_declares_that_it_resolves_its_batches(live_service):
    with live_service.client() as admin:
        name, token = new_catalog(admin)
        other, other_token = new_catalog(admin)
    url = f"/catalogs/{name}/batches/resolver"
    assert get(live_service, url, token=token).json() == {"by": "service"}
    declared = put(live_service, url, token, json={"by": "client"})
    assert declared.status_code == 200 and declared.json() == {"by": "client"}
    assert put(live_service, url, token, json={"by": "client"}).status_code == 200  # idempotent
    assert get(live_service, url, token=token).json() == {"by": "client"}
    assert get(live_service, f"/catalogs/{other}/batches/resolver", token=other_token).json() == {"by": "service"}
    assert put(live_service, url, token, json={"by": "somebody"}).status_code == 422
    assert put(live_service, url, other_token, json={"by": "service"}).status_code in (401, 403)
    assert get(live_service, url, token=token).json() == {"by": "client"}
    assert put(live_service, url, token, json={"by": "service"}).json() == {"by": "service"}
    assert get(live_service, url, token=token).json() == {"by": "service"}


def test_the_resolver_leaves_unrecorded_batches_of_a_client_resolved_catalog_until_abandoned(fresh_db):  # noqa: F811
    async def run():
        conn = await connect(fresh_db)
        try:
            await migrate(conn)
            registry = CatalogRegistry()
            catalogs = {}
            for name in ("by-client", "by-service"):
                catalogs[name], _ = await registry.create(conn, CatalogCreate(
                    id=name, indexes=[IndexDeclaration(name="portal_type", type="FieldIndex")]))
            await batches.declare_resolver(conn, catalogs["by-client"], by_client=True)
            for name, catalog in catalogs.items():
                for outcome in ("recorded", "unrecorded"):
                    batch_id = f"{name}-{outcome}"
                    batch = Batch.model_validate({"batch_id": batch_id, "entries": [
                        {"op": "index", "uid": batch_id, "path": f"/plone/{batch_id}",
                         "values": {"portal_type": "Document"}}]})
                    async with conn.transaction():
                        await batches.stage(conn, catalog, batch, batches.convert(batch, catalog, 10))
            await conn.execute("insert into catalog_txn_outcome (batch_id, tid) "
                               "values ('by-client-recorded', 1), ('by-service-recorded', 2)")
            await conn.execute("update catalog_batch set created = now() - interval '2 hours'")

            outcomes = sorted(await batches.resolve_expired(conn, ttl_seconds=3600, abandon_seconds=86400))
            assert outcomes == [("by-client", "by-client-recorded", "committed"),
                                ("by-service", "by-service-recorded", "committed"),
                                ("by-service", "by-service-unrecorded", "aborted")]
            state = await conn.fetchval("select state from catalog_batch where batch_id = 'by-client-unrecorded'")
            assert state == "staged"  # the client decides first
            assert await batches.resolve_expired(conn, ttl_seconds=3600) == []  # no abandon ttl: never

            await conn.execute("update catalog_batch set created = now() - interval '2 days' "
                               "where batch_id = 'by-client-unrecorded'")
            assert await batches.resolve_expired(conn, ttl_seconds=3600, abandon_seconds=86400) == [
                ("by-client", "by-client-unrecorded", "aborted")]
        finally:
            await conn.close()

    asyncio.run(run())
