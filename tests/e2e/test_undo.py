"""A ZODB undo on history-preserving storages (FileStorage, JsonbStorage): the connector's catalog
follows it, as ZCatalog's entries, kept in ZODB, come back with the undo
(plone_connector/catalog/undo.py, docs/decisions/0017-catalog-follows-undo.md).

Both sites of the connector's layer (``plone`` with ZCatalog, ``conn`` with the connector) live
on one storage; each gets the same actions, each action is undone in the next transaction, and
both catalogs must then answer the same, and the connector's must equal ZODB (verify).
"""

from __future__ import annotations

import psycopg
import pytest
import transaction
import ZODB
from plone import api
from plone.app.testing import PLONE_FIXTURE

from plone_connector.catalog.verify import verify
from plone_connector.storage import JsonbStorage
from tests.connector import sites
from tests.connector.sites import SITES
from tests.e2e.jsonb_layer import JsonbConnectorLayer, layer_db, layer_set_up, seed
from tests.e2e.test_crash_on_filestorage import FileStorageConnectorLayer
from tests.storage.conftest import dsn_with_schema

pytestmark = [pytest.mark.slow, pytest.mark.plone]

FOLDER = "undo"
SCHEMA = "zodb_undo_hp"


class HistoryJsonbLayer(JsonbConnectorLayer):
    """The connector's layer on a history-preserving JsonbStorage."""

    catalog_id = "undo-jsonb-conn"

    def _jsonb_db(self, base_db, name=None) -> ZODB.DB:
        storage = JsonbStorage(self.dsn, name="undo-seed", history_preserving=True)
        try:
            storage.cleanup()
            seed(storage, layer_db(PLONE_FIXTURE).storage)
        finally:
            storage.close()
        return ZODB.DB(JsonbStorage(self.dsn, name="undo", history_preserving=True))


FILE_LAYER = FileStorageConnectorLayer(name="UndoFileStorageLayer")
FILE_LAYER.catalog_id = "undo-fs-conn"
JSONB_HP_LAYER = HistoryJsonbLayer(name="UndoHistoryJsonbLayer")
CURRENT = {}


@pytest.fixture(scope="module", params=["FileStorage", "JsonbStorage"])
def undo_layer(request, catalog_service, database_url, tmp_path_factory):
    if request.param == "FileStorage":
        layer = FILE_LAYER
        layer.path = tmp_path_factory.mktemp("undo-filestorage")
    else:
        layer = JSONB_HP_LAYER
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f"create schema if not exists {SCHEMA}")
        layer.dsn = dsn_with_schema(database_url, SCHEMA)
    with layer_set_up(layer):
        CURRENT["layer"] = layer
        for name in SITES:
            with on_site(name) as site:
                api.content.create(container=site, type="Folder", id=FOLDER, title="Undo tests")
        yield layer
    CURRENT.clear()


def on_site(name, **options):
    return sites.on_site(name, db=CURRENT["layer"]["zodbDB"], **options)


def act_then_undo(name: str, action) -> None:
    """``action`` on site ``name`` in a transaction; then that transaction undone in another."""
    with on_site(name) as site:
        action(site[FOLDER])
    db = CURRENT["layer"]["zodbDB"]
    [last] = db.undoLog(0, 1)
    with on_site(name):
        transaction.get().note(f"undo on {name}")
        db.undoMultiple([last["id"]])


def act(name: str, action) -> None:
    with on_site(name) as site:
        action(site[FOLDER])


def catalog_rows(name: str) -> list[tuple]:
    with on_site(name, commit=False) as site:
        prefix = "/".join(site.getPhysicalPath())
        base = f"{prefix}/{FOLDER}"
        brains = site.portal_catalog.unrestrictedSearchResults(path=base, sort_on="getId")
        rows = [(b.getPath()[len(prefix):], b.Title, b.review_state) for b in brains]
        # The text index too: the entry's values come back, not only its metadata.
        rows.append(sorted(b.getPath()[len(prefix):] for b in site.portal_catalog.unrestrictedSearchResults(
            SearchableText="original", path=base)))
        return rows


def assert_same_catalogs(step: str) -> None:
    stock, connected = (catalog_rows(name) for name in SITES)
    assert connected == stock, step
    with on_site(sites.CONNECTED, commit=False) as site:
        report = verify(site)
        assert report.clean, (step, report.as_dict())


def test_the_catalog_follows_undone_edits_creations_and_deletions(undo_layer):
    for name in SITES:
        act(name, lambda folder: api.content.create(container=folder, type="Document", id="doc",
                                                    title="original title"))
    assert_same_catalogs("created")

    def edit(folder):
        folder["doc"].title = "edited title"
        folder["doc"].reindexObject()

    for name in SITES:
        act_then_undo(name, edit)
    assert_same_catalogs("edit undone")
    assert catalog_rows(sites.CONNECTED)[0][1] == "original title"

    for name in SITES:
        act_then_undo(name, lambda folder: api.content.create(container=folder, type="Document", id="new",
                                                              title="original new"))
    assert_same_catalogs("creation undone")
    assert "/undo/new" not in [row[0] for row in catalog_rows(sites.CONNECTED)[:-1]]

    for name in SITES:
        act(name, lambda folder: api.content.create(container=folder, type="Document", id="second",
                                                    title="original second"))
    for name in SITES:
        act_then_undo(name, lambda folder: api.content.delete(obj=folder["doc"]))
    assert_same_catalogs("deletion undone")
    assert "/undo/doc" in [row[0] for row in catalog_rows(sites.CONNECTED)[:-1]]

    # Undoing the undo (a redo) follows too: the document is deleted again.
    db = CURRENT["layer"]["zodbDB"]
    for name in SITES:
        [undo] = [entry for entry in db.undoLog(0, 20) if _text(entry["description"]) == f"undo on {name}"][:1]
        with on_site(name):
            db.undoMultiple([undo["id"]])
    assert_same_catalogs("undo undone")
    assert "/undo/doc" not in [row[0] for row in catalog_rows(sites.CONNECTED)[:-1]]

    # A transaction that also rebuilt the catalog notes the whole catalog: its undo compares the
    # whole site (verify) and repairs what differs.
    def edit_and_rebuild(folder):
        folder["second"].title = "rebuilt title"
        folder["second"].reindexObject()
        api.portal.get_tool("portal_catalog").clearFindAndRebuild()

    for name in SITES:
        act_then_undo(name, edit_and_rebuild)
    assert_same_catalogs("rebuild undone")
    assert ("/undo/second", "original second", "private") in catalog_rows(sites.CONNECTED)


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value
