"""A doomed or aborted transaction leaves nothing in the service, asked directly over HTTP.

The tool's own answers go through its query cache and its transaction's staged batch; these tests
ask the service itself, for the committed catalog and for the catalog as the transaction's staged
batch would leave it (a staged batch that was not aborted would still show there).
"""

from __future__ import annotations

import httpx
import pytest
import transaction
from plone import api
from transaction.interfaces import DoomedTransaction

from plone_connector.catalog.batch import EXTENSION_KEY
from plone_connector.catalog.wire import decode_metadata
from tests.connector.sites import CONNECTED, delete_from, on_site, service_catalog_id
from tests.connector.sites import catalog_paths as paths

pytestmark = [pytest.mark.slow, pytest.mark.plone]

ROOT = "discarded"


def service_titles(catalog_service, catalog_id: str, path: str, batch_ids=()) -> dict[str, str]:
    """Path -> Title of every entry under ``path`` in the service catalog ``catalog_id``, as the
    service itself answers (unrestricted)."""
    response = httpx.post(
        f"{catalog_service.url}/catalogs/{catalog_id}/query",
        json={"query": {"path": path}, "metadata": ["Title"], "batch_ids": list(batch_ids),
              "show_inactive": True},
        headers={"Authorization": f"Bearer {catalog_service.admin_token}", "X-Catalog-Unrestricted": "1"},
        timeout=10,
    )
    response.raise_for_status()
    return {item["path"]: decode_metadata(item["metadata"]["Title"]) for item in response.json()["items"]}


@pytest.fixture
def committed_root(plone_sites):
    with on_site(CONNECTED) as site:
        root = api.content.create(container=site, type="Folder", id=ROOT, title="Root")
        api.content.create(container=root, type="Document", id="kept", title="Kept")
        api.content.create(container=root, type="Document", id="doomed-to-stay", title="Stays")
    yield f"/{CONNECTED}/{ROOT}"
    delete_from(CONNECTED, ROOT)


@pytest.mark.parametrize("staged", [True, False], ids=["staged-by-a-query", "never-staged"])
@pytest.mark.parametrize("end", ["doom", "abort"])
def test_a_discarded_transaction_leaves_nothing_in_the_service(catalog_service, committed_root, end, staged):
    # Read before the transaction below: reading it opens and ends a transaction of its own.
    catalog_id = service_catalog_id()
    before = service_titles(catalog_service, catalog_id, committed_root)
    assert before == {committed_root: "Root", f"{committed_root}/kept": "Kept",
                      f"{committed_root}/doomed-to-stay": "Stays"}
    with on_site(CONNECTED, commit=False) as site:
        root = site[ROOT]
        new = api.content.create(container=root, type="Folder", id="new", title="New")
        api.content.create(container=new, type="Document", id="inside", title="Inside")
        root["kept"].title = "Renamed"
        root["kept"].reindexObject()
        api.content.delete(root["doomed-to-stay"])
        if staged:
            # A query inside the transaction stages its batch (read your own writes).
            assert paths(site, path=committed_root) == [
                committed_root, f"{committed_root}/kept", f"{committed_root}/new", f"{committed_root}/new/inside"]
        batch_ids = transaction.get().extension[EXTENSION_KEY]
        if staged:
            # The service holds the staged batch: asked for it by id, it shows the changes.
            assert service_titles(catalog_service, catalog_id, committed_root, batch_ids)[f"{committed_root}/kept"] == "Renamed"
        if end == "doom":
            transaction.doom()
            with pytest.raises(DoomedTransaction):
                transaction.commit()
        # on_site aborts the transaction (the publisher aborts a doomed one the same way).
    assert service_titles(catalog_service, catalog_id, committed_root) == before
    # Named by id, the discarded batch adds nothing either: its staged copy was aborted.
    assert service_titles(catalog_service, catalog_id, committed_root, batch_ids) == before
