"""How a transaction's catalog changes reach the service, against what ZODB committed (found in a
review, stop 20; each test failed before its fix, decisions/0015 and 0016).

1. Concurrent transactions that ZODB commits both (they change different objects) while their
   catalog entries overlap: ZCatalog keeps both changes (each writes only the index data it
   changed, or the two conflict and one is retried). The service kept the entry whose snapshot
   version was not older, computed from a snapshot without the other's change; now the uid
   claims make the two conflict in ZODB, and the second is retried:
   - a security reindex (local roles of the folder) and an edit of a document in it;
   - a reorder of a folder and an edit of a document in it;
   - a deletion and a security reindex of the subtree holding the deleted object (a phantom).
2. A rebuild (a clear batch) whose service commit is left to the resolver took newer changes
   of other transactions with it.
3. A schema change (delIndex) of a transaction that is then aborted reached the service.
"""

from __future__ import annotations

import threading

import pytest
import transaction
from plone import api
from ZODB.POSException import ConflictError

from plone_connector.catalog.client import get_client
from tests.connector.sites import CONNECTED, STOCK, delete_from, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

FOLDER = "review-sec"
PROBE_DOC = "review-probe-doc"
PROBE_INDEX = "review_probe"


@pytest.fixture
def remove_created(plone_sites):
    """Other test modules compare the two sites: leave no extra content behind."""
    yield
    for name in (STOCK, CONNECTED):
        delete_from(name, FOLDER, PROBE_DOC)


def _member_finds(name: str, path: str) -> list[str]:
    with on_site(name, user="member", commit=False) as site:
        return sorted(b.getPath() for b in site.portal_catalog.searchResults(path={"query": path, "depth": 0}))


def _concurrently(name: str, change_a, change_b, retry_b: bool = False) -> None:
    """``change_a(site)`` in transaction A and ``change_b(site)`` in transaction B, both begun
    before either commits (one snapshot); A commits first (ZODB, then the service), then B.
    ``retry_b``: a ConflictError of B is retried in a new transaction, as Zope's publisher does."""
    b_ready, a_done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def run_a():
        try:
            with on_site(name) as site:
                change_a(site)
                assert b_ready.wait(30)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            a_done.set()

    def run_b():
        try:
            try:
                with on_site(name) as site:
                    change_b(site)
                    b_ready.set()
                    assert a_done.wait(30)
            except ConflictError:
                if not retry_b:
                    raise
                with on_site(name) as site:
                    change_b(site)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            b_ready.set()

    threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors  # both committed (no ConflictError: they change different objects)


def _concurrent_security_and_edit(name: str, grant: bool) -> None:
    """Transaction A gives "member" the Reader role on the folder, or takes it away (CMFCore's
    security reindex of its contents); transaction B, begun before A committed, edits the document
    in it."""
    with on_site(name) as site:
        folder = api.content.create(container=site, type="Folder", id=FOLDER, title="Sec")
        api.content.create(container=folder, type="Document", id="doc", title="Doc")
        if not grant:
            folder.manage_setLocalRoles("member", ["Reader"])
            folder.reindexObjectSecurity()

    def change_roles(site):
        folder = site[FOLDER]
        if grant:
            folder.manage_setLocalRoles("member", ["Reader"])
        else:
            folder.manage_delLocalRoles(["member"])
        folder.reindexObjectSecurity()

    def edit(site):
        doc = site[FOLDER]["doc"]
        doc.setTitle("Doc, edited")
        doc.reindexObject()

    # The service's site conflicts here (both claim the document's uid, tool._claim) and B is
    # retried, as Zope's publisher does; ZCatalog merges the two at the index level.
    _concurrently(name, change_roles, edit, retry_b=True)


@pytest.mark.parametrize("grant", [True, False], ids=["role-granted", "role-revoked"])
def test_concurrent_security_reindex_and_edit_keep_both(remove_created, grant):
    doc = "/{}/" + FOLDER + "/doc"
    for name in (STOCK, CONNECTED):
        _concurrent_security_and_edit(name, grant)
    # ZODB has both changes: the title, and member's local role on the folder (or its removal).
    with on_site(CONNECTED, commit=False) as site:
        assert site[FOLDER]["doc"].Title() == "Doc, edited"
        assert ("Reader" in site[FOLDER].get_local_roles_for_userid("member")) == grant
        brains = site.portal_catalog.unrestrictedSearchResults(path={"query": doc.format(CONNECTED), "depth": 0})
        assert [b.Title for b in brains] == ["Doc, edited"]
    # ZCatalog (the oracle) keeps the security change: member finds the document if and only if
    # member has the Reader role on its folder.
    expected = (lambda name: [doc.format(name)]) if grant else (lambda name: [])
    assert _member_finds(STOCK, doc.format(STOCK)) == expected(STOCK)
    # The service must too. It does not: B's full entry, computed from B's snapshot (before A's
    # change of the local roles) and carrying the same snapshot version, replaced A's security
    # reindex. Revoked, member keeps finding the private document (title, description).
    assert _member_finds(CONNECTED, doc.format(CONNECTED)) == expected(CONNECTED), (
        "the service lost the concurrent security reindex of the document"
    )


def _listing(name: str) -> list[str]:
    with on_site(name, commit=False) as site:
        brains = site.portal_catalog.unrestrictedSearchResults(
            path={"query": f"/{name}/{FOLDER}", "depth": 1}, sort_on="getObjPositionInParent")
        return [b.getId for b in brains]


def test_concurrent_reorder_and_edit_keep_the_order(remove_created):
    """A moves document "a" to the bottom of the folder (the connector re-sends the siblings'
    positions); B, begun before A committed, edits "a" (a full entry with the position its snapshot
    had). ZCatalog's GopipIndex asks the folder, so it is always right."""
    for name in (STOCK, CONNECTED):
        with on_site(name) as site:
            folder = api.content.create(container=site, type="Folder", id=FOLDER, title="Order")
            for doc_id in "abcd":
                api.content.create(container=folder, type="Document", id=doc_id, title=doc_id)

        def move_to_bottom(site):
            site[FOLDER].moveObjectsToBottom(["a"])

        def edit(site):
            site[FOLDER]["a"].setTitle("a, edited")
            site[FOLDER]["a"].reindexObject()

        _concurrently(name, move_to_bottom, edit, retry_b=True)
    with on_site(CONNECTED, commit=False) as site:
        assert list(site[FOLDER].objectIds()) == ["b", "c", "d", "a"]  # ZODB has the move
        assert site[FOLDER]["a"].Title() == "a, edited"  # and the edit
    assert _listing(STOCK) == ["b", "c", "d", "a"]
    assert _listing(CONNECTED) == ["b", "c", "d", "a"], "the service lost the concurrent reorder"


def test_concurrent_delete_and_security_reindex_leave_no_phantom(remove_created):
    """A deletes document "x" of folder "p"; B, begun before A committed, changes the local roles of
    the folder above "p" (a security reindex of its subtree, "x" included, as B's snapshot has it).
    ZODB sees no conflict (A changes "p", B the folder above). ZCatalog: B's reindex of "x"
    conflicts with A's removal (the same index buckets), B is retried and finds no "x". The
    service must not bring "x" back: B's partial entry has the version of A's tombstone (one
    snapshot), and a tombstone stops only strictly older entries."""
    for name in (STOCK, CONNECTED):
        with on_site(name) as site:
            top = api.content.create(container=site, type="Folder", id=FOLDER, title="Top")
            inner = api.content.create(container=top, type="Folder", id="p", title="P")
            api.content.create(container=inner, type="Document", id="x", title="X")

        def delete(site):
            site[FOLDER]["p"].manage_delObjects(["x"])

        def share(site):
            site[FOLDER].manage_setLocalRoles("member", ["Reader"])
            site[FOLDER].reindexObjectSecurity()

        _concurrently(name, delete, share, retry_b=True)
    for name in (STOCK, CONNECTED):
        with on_site(name, commit=False) as site:
            assert "x" not in site[FOLDER]["p"]  # ZODB: deleted
            assert "Reader" in site[FOLDER].get_local_roles_for_userid("member")
    assert _paths(STOCK, f"/{STOCK}/{FOLDER}/p/x") == []
    phantom = _paths(CONNECTED, f"/{CONNECTED}/{FOLDER}/p/x")
    if phantom:
        # (Left in place, the phantom entry, without metadata, also makes plone.app.linkintegrity's
        # check fail when the folder is deleted: TypeError, unhashable type: 'Missing'.)
        with on_site(CONNECTED) as site:
            site.portal_catalog.uncatalog_object(f"/{CONNECTED}/{FOLDER}/p/x")
    assert phantom == [], "a phantom entry of the deleted object"


def _paths(name: str, path: str) -> list[str]:
    with on_site(name, commit=False) as site:
        return [b.getPath() for b in site.portal_catalog.unrestrictedSearchResults(path={"query": path, "depth": 0})]


def test_a_rebuild_committed_late_by_the_resolver_keeps_newer_changes(remove_created, monkeypatch):
    """A rebuild (clearFindAndRebuild: a clear batch) commits in ZODB, and its process dies before
    the service commit: the batch stays staged. Then another transaction edits a document and
    commits normally. The resolver later finds the rebuild's id in the ZODB log and commits its
    batch. The clear must not take the newer edit with it: the connector itself refuses to apply a
    clear late for that reason (batch._apply_again), but the resolver commits it all the same."""
    from plone_connector.catalog import batch as batch_module
    from plone_connector.catalog import outcomes

    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Folder", id=FOLDER, title="Rebuild")
        api.content.create(container=site[FOLDER], type="Document", id="y", title="Y")
    died = []
    # The process is killed between ZODB's tpc_finish and the service commit of the rebuild.
    monkeypatch.setattr(batch_module, "_commit", lambda client, catalog_id, batch_id, batch=None: died.append(batch_id))
    with on_site(CONNECTED) as site:
        site.portal_catalog.clearFindAndRebuild()
    monkeypatch.undo()
    assert len(died) == 1
    with on_site(CONNECTED) as site:
        site[FOLDER]["y"].setTitle("Y, edited")
        site[FOLDER]["y"].reindexObject()
    with on_site(CONNECTED) as site:
        resolved = outcomes.resolve_expired(site.portal_catalog, older_than=0)
    assert (died[0], "committed") in resolved  # ZODB committed the rebuild: its batch is committed
    with on_site(CONNECTED, commit=False) as site:
        assert site[FOLDER]["y"].Title() == "Y, edited"
        brains = site.portal_catalog.unrestrictedSearchResults(path={"query": f"/{CONNECTED}/{FOLDER}/y", "depth": 0})
        assert [b.Title for b in brains] == ["Y, edited"], "the late clear replaced a newer entry by an older one"


def _service_index_names(catalog_id: str) -> set[str]:
    return {index.name for index in get_client().get_catalog(catalog_id).indexes}


@pytest.fixture
def probe_index(remove_created):
    with on_site(CONNECTED) as site:
        site.portal_catalog.addIndex(PROBE_INDEX, "FieldIndex", extra={"indexed_attrs": "Title"})
        api.content.create(container=site, type="Document", id=PROBE_DOC, title="Probe")
    yield
    with on_site(CONNECTED) as site:
        # Declares ZODB's indexes to the service again, whatever the test left there.
        site.portal_catalog._schema_changed()
    with on_site(CONNECTED) as site:
        if PROBE_INDEX in site.portal_catalog.indexes():
            site.portal_catalog.delIndex(PROBE_INDEX)


def test_schema_change_of_an_aborted_transaction_stays_out_of_the_service(probe_index):
    with on_site(CONNECTED, commit=False) as site:
        catalog_id = site.portal_catalog.catalog_id()
        assert PROBE_INDEX in site.portal_catalog.indexes()
    assert PROBE_INDEX in _service_index_names(catalog_id)

    # An upgrade step removes the index, reindexes, queries, and then fails: Zope aborts it.
    with pytest.raises(RuntimeError), on_site(CONNECTED) as site:
        catalog = site.portal_catalog
        catalog.delIndex(PROBE_INDEX)
        site[PROBE_DOC].reindexObject()
        catalog.unrestrictedSearchResults(portal_type="Document")  # stages this transaction's batch
        raise RuntimeError("the rest of the upgrade step fails")

    with on_site(CONNECTED, commit=False) as site:
        assert PROBE_INDEX in site.portal_catalog.indexes()  # ZODB: nothing happened
    # Every later edit sends a value for the index ZODB still has; the service must know it.
    edit_error = None
    try:
        with on_site(CONNECTED) as site:
            site[PROBE_DOC].setTitle("Probe, edited")
            site[PROBE_DOC].reindexObject()
    except Exception as exc:  # noqa: BLE001
        edit_error = exc
    assert PROBE_INDEX in _service_index_names(catalog_id), (
        f"the aborted transaction's delIndex reached the service; a later edit then failed with: {edit_error!r}"
    )
    assert edit_error is None
    transaction.abort()
