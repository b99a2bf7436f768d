"""A rebuild (clear batch, versioned: decisions/0016) and an object added at once.

Transaction A (the adder) begins; another transaction T0 commits; transaction B (a
clearFindAndRebuild) begins after T0, so its snapshot is newer than A's; A adds a document
(without reindexing the folder: an import script's _setObject(suppress_events=True) +
indexObject) and commits (ZODB, then the service); B, whose snapshot does not have A's
document, commits. ZODB commits both (they change no common object: uid claims of different
uids merge; nothing makes a clear conflict with a change of a uid it did not claim). The
document is in ZODB, so it must be in the catalog (ZCatalog: B conflicts, is retried, keeps it).
The versioned clear removes rows whose version is older than B's snapshot version, and A's
entry carries A's snapshot version (older than B's), although A committed after B's snapshot:
the clear takes it with it. (With Plone's events the add also reindexes the folder, whose uid
the rebuild claims too, and the two conflict: that case is safe.)
"""

from __future__ import annotations

import threading

import pytest
from plone import api
from ZODB.POSException import ConflictError

from tests.connector.sites import CONNECTED, STOCK, delete_from, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

ADD_TO = "review2-add-to"
OTHER = "review2-other"
NEW_DOC = "review2-new-doc"


@pytest.fixture
def remove_created(plone_sites):
    yield
    for name in (STOCK, CONNECTED):
        with on_site(name) as site:
            if ADD_TO in site and NEW_DOC in site[ADD_TO]:
                site.portal_catalog.uncatalog_object(f"/{name}/{ADD_TO}/{NEW_DOC}")
                site[ADD_TO]._delObject(NEW_DOC, suppress_events=True)
        delete_from(name, ADD_TO, OTHER)


def _paths(name: str, path: str) -> list[str]:
    with on_site(name, commit=False) as site:
        return [b.getPath() for b in site.portal_catalog.unrestrictedSearchResults(path={"query": path, "depth": 0})]


conflicts: list[str] = []


def _add_during_rebuild(name: str) -> list[BaseException]:
    conflicts.clear()
    with on_site(name) as site:
        api.content.create(container=site, type="Folder", id=ADD_TO, title="Add to")
        api.content.create(container=site, type="Folder", id=OTHER, title="Other")
    with on_site(name) as site:
        # Every uid claimed once (the test site's first content predates the claims tree): a
        # site in use, whose rebuild changes claims rather than adding them.
        site.portal_catalog.clearFindAndRebuild()

    a_open, t0_done, b_open, a_done = (threading.Event() for _ in range(4))
    errors: list[BaseException] = []

    def run_a():
        try:
            with on_site(name) as site:
                site[ADD_TO].Title()  # the snapshot is taken
                a_open.set()
                assert b_open.wait(30)
                # Added without the container's reindex (events suppressed, indexed explicitly, as
                # import scripts do): with Plone's events the folder's reindex claims the folder,
                # which the rebuild claims too, and the two conflict.
                from plone.dexterity.utils import createContent

                folder = site[ADD_TO]
                folder._setObject(NEW_DOC, createContent("Document", id=NEW_DOC, title="New"),
                                  suppress_events=True)
                folder[NEW_DOC].indexObject()
        except BaseException as exc:  # noqa: BLE001
            errors.append((threading.current_thread().name, repr(exc), str(exc)))
        finally:
            a_open.set()
            a_done.set()

    def run_b():
        try:
            assert t0_done.wait(30)
            try:
                with on_site(name) as site:
                    site[OTHER].Title()
                    b_open.set()
                    site.portal_catalog.clearFindAndRebuild()
                    assert a_done.wait(60)
            except ConflictError:
                # Zope's publisher retries it from a fresh snapshot (ZCatalog conflicts here).
                conflicts.append(name)
                with on_site(name) as site:
                    site.portal_catalog.clearFindAndRebuild()
        except BaseException as exc:  # noqa: BLE001
            errors.append((threading.current_thread().name, repr(exc), str(exc)))
        finally:
            b_open.set()

    ta, tb = threading.Thread(target=run_a), threading.Thread(target=run_b)
    ta.start()
    assert a_open.wait(30)
    # T0: any commit between A's snapshot and B's.
    with on_site(name) as site:
        site[OTHER].setTitle("Other, T0")
    t0_done.set()
    tb.start()
    ta.join(120)
    tb.join(120)
    return errors


def test_object_added_during_a_rebuild_stays_cataloged(remove_created):
    results = {}
    for name in (STOCK, CONNECTED):
        errors = _add_during_rebuild(name)
        with on_site(name, commit=False) as site:
            in_zodb = NEW_DOC in site[ADD_TO]
        results[name] = (errors, list(conflicts), in_zodb, _paths(name, f"/{name}/{ADD_TO}/{NEW_DOC}"))
    errors, _, in_zodb, found = results[CONNECTED]
    assert not errors, results
    assert in_zodb, results
    assert results[STOCK][3] == [f"/{STOCK}/{ADD_TO}/{NEW_DOC}"], results  # ZCatalog: kept
    assert found == [f"/{CONNECTED}/{ADD_TO}/{NEW_DOC}"], (
        f"the rebuild's versioned clear removed a document committed after its snapshot: {results}"
    )
