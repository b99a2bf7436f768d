"""The connector's client through a PostgreSQL restart: the real service answers 503 while its
database is away, and the client's idempotent calls (a search, staging and committing a batch)
wait for it within their timeout instead of failing the page or the transaction."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest

from catalog_schemas.api import Batch, CatalogCreate, IndexDeclaration, IndexEntry, SearchRequest
from plone_connector.catalog.client import CatalogClient
from plone_connector.catalog.settings import ConnectorSettings
from tests.live import start_service
from tests.restartable_pg import RestartablePostgres


@pytest.fixture(scope="module")
def service():
    server = RestartablePostgres()
    server.start()
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute("create database catalog")
    service = start_service(server.url("catalog"))
    try:
        yield service, server
    finally:
        service.stop()
        server.destroy()


def test_calls_made_while_postgresql_is_away_succeed_once_it_is_back(service):
    live, server = service
    client = CatalogClient(ConnectorSettings(url=live.url, token=live.admin_token, timeout=15))
    name = "c-" + uuid.uuid4().hex[:8]
    try:
        client.create_catalog(CatalogCreate(id=name, indexes=[IndexDeclaration(name="portal_type", type="FieldIndex")]))
        server.stop("fast")
        outcomes: dict[str, object] = {}

        def call(kind, fn):
            try:
                outcomes[kind] = fn()
            except Exception as exc:  # recorded: the assertion below names it
                outcomes[kind] = exc

        batch = Batch(batch_id=uuid.uuid4().hex, entries=[
            IndexEntry(uid="u1", path="/plone/u1", values={"portal_type": "Document"}, version=1)])
        threads = [
            threading.Thread(target=call, args=("search", lambda: client.search(
                name, SearchRequest(query={"portal_type": "Document"}), None, unrestricted=True))),
            threading.Thread(target=call, args=("stage and commit", lambda: (
                client.stage_batch(name, batch), client.commit_batch(name, batch.batch_id)))),
        ]
        for thread in threads:
            thread.start()
        time.sleep(2.0)
        assert all(thread.is_alive() for thread in threads), outcomes  # still waiting for the database
        server.start()
        back = time.monotonic()
        for thread in threads:
            thread.join(20)
        waited = time.monotonic() - back
        assert not any(isinstance(outcome, Exception) for outcome in outcomes.values()), outcomes
        assert outcomes["search"].items_total in (0, 1)
        assert outcomes["stage and commit"][1].state == "committed"
        # Pauses between attempts are at most a second: answered soon after the database is back.
        assert waited < 3.0, waited
        after = client.search(name, SearchRequest(query={"portal_type": "Document"}), None, unrestricted=True)
        assert [item["uid"] for item in after.items] == ["u1"]
    finally:
        if server.running():
            client.drop_catalog(name)
        client.close()
