"""A Plone site on JsonbStorage with the catalog connector and the live service, through a site's life.

Each step acts on the site ``conn`` of the JSONB layer (tests/e2e/jsonb_layer.py) in its own
committed transaction. After each step the catalog is checked against ZODB itself, the oracle:

- unrestricted search finds exactly the objects that exist under the test folder, and each brain's
  review state and title are the object's;
- restricted search and plone.restapi's @search, for anonymous and three users, find exactly the
  objects ZODB's own security check lets that user view (and, unless the user may access inactive
  content, only those currently effective);
- a few text and keyword searches find what the step's changes say they must.

Then the database is closed and a new one opened on the same tables: everything must still be
there and answer the same. Last, every committed transaction's catalog batch id must be recorded
by the storage in ``catalog_txn_outcome`` (what the service's resolver relies on), and an aborted
transaction's must not.

A second test does the same kind of life through the Zope publisher with plone.restapi, with a
file blob read back after a restart.
"""

from __future__ import annotations

import base64
from urllib.parse import unquote, urlsplit

import psycopg
import pytest
import transaction
from AccessControl import getSecurityManager
from DateTime import DateTime
from plone import api
from plone.restapi.search.handler import SearchHandler
from plone.testing import zope
from ZODB.utils import u64

from plone_connector.catalog.cache import query_cache
from plone_connector.storage import JsonbStorage
from tests.connector.sites import CONNECTED, PASSWORD, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

ROOT = "life"
VIEWERS = (None, "member", "editor", "manager")


def base(site) -> str:
    return "/".join(site.getPhysicalPath()) + "/" + ROOT


def existing(site) -> dict[str, object]:
    """Every content object under the test folder, by path, as ZODB holds it."""
    found = {}

    def walk(obj):
        found["/".join(obj.getPhysicalPath())] = obj
        for child in obj.objectValues():
            if hasattr(child, "reindexObject"):
                walk(child)

    if ROOT in site.objectIds():
        walk(site[ROOT])
    return found


def visible(site, objects: dict[str, object]) -> set[str]:
    """What the current user may find: ZODB's own View check, and the effective range unless
    the user may access inactive content (Plone's catalog tool applies the same rule)."""
    security = getSecurityManager()
    now = DateTime()
    see_inactive = security.checkPermission("Access inactive portal content", site)
    return {
        path for path, obj in objects.items()
        if security.checkPermission("View", obj)
        and (see_inactive or obj.effective() <= now <= obj.expires())
    }


def search_rows(user) -> dict:
    """What the catalog answers as ``user`` (None: anonymous) about the test folder."""
    with on_site(CONNECTED, user=user, commit=False) as site:
        catalog = site.portal_catalog
        restricted = catalog(path=base(site))
        handler = SearchHandler(site, site.REQUEST).search(
            {"path": base(site), "sort_on": "sortable_title", "metadata_fields": ["review_state"]})
        return {
            "restricted": sorted((b.getPath(), b.Title, b.review_state) for b in restricted),
            "count": restricted.actual_result_count,
            "@search": sorted(
                (unquote(item["@id"]).split("/" + site.getId(), 1)[1], item["title"], item["review_state"])
                for item in handler["items"]),
            "@search total": handler["items_total"],
        }


def check_against_zodb(step: str) -> dict:
    """Assert that every kind of search agrees with ZODB; return the answers (for later steps)."""
    answers = {}
    with on_site(CONNECTED, commit=False) as site:
        objects = existing(site)
        brains = site.portal_catalog.unrestrictedSearchResults(path=base(site))
        unrestricted = {b.getPath(): b for b in brains}
        assert set(unrestricted) == set(objects), f"{step}: unrestricted search vs ZODB"
        for path, brain in unrestricted.items():
            obj = objects[path]
            assert (brain.Title, brain.review_state) == (obj.Title(), api.content.get_state(obj)), \
                f"{step}: metadata of {path}"
        answers["unrestricted"] = sorted(unrestricted)
    for user in VIEWERS:
        with on_site(CONNECTED, user=user, commit=False) as site:
            expected = visible(site, existing(site))
        found = search_rows(user)
        label = f"{step}, as {user or 'anonymous'}"
        assert {row[0] for row in found["restricted"]} == expected, f"{label}: restricted search"
        assert found["count"] == len(expected), f"{label}: actual_result_count"
        prefix = "/" + CONNECTED
        assert {prefix + row[0] for row in found["@search"]} == expected, f"{label}: @search"
        assert found["@search total"] == len(expected), f"{label}: @search items_total"
        answers[user] = found
    return answers


def found_ids(**query) -> list[str]:
    with on_site(CONNECTED, commit=False) as site:
        query.setdefault("path", base(site))
        return sorted(b.getPath()[len(base(site)):] for b in site.portal_catalog.unrestrictedSearchResults(**query))


class Steps:
    """Runs each step in its own transaction and keeps the catalog batch ids of the commits."""

    def __init__(self):
        self.committed: list[tuple[str, str]] = []  # (step, batch id)

    def run(self, step: str, action) -> None:
        with on_site(CONNECTED) as site:
            action(site)
            # The connector names its batch in this dict when it joins, which may be as late as
            # the commit (the indexing queue is processed then); the transaction drops it after.
            extension = transaction.get().extension
        ids = list(extension.get("catalog_batch_ids") or ())
        assert ids, f"{step}: the transaction sent no catalog batch"
        self.committed.extend((step, batch_id) for batch_id in ids)


@pytest.fixture
def outcome_rows(database_url):
    def rows(batch_ids):
        with psycopg.connect(database_url) as conn:
            return dict(conn.execute(
                "select batch_id, tid from catalog_txn_outcome where batch_id = any(%s)",
                (list(batch_ids),)).fetchall())

    return rows


@pytest.fixture
def no_leftovers(plone_sites):
    """Remove the test folder even when the test fails: the connector's differential scenario
    (which may run later on the same sites) compares the sites' top levels."""
    yield
    with on_site(CONNECTED) as site:
        if ROOT in site.objectIds():
            api.content.delete(obj=site[ROOT])


def test_site_life_on_jsonb_storage(plone_sites, no_leftovers, database_url, outcome_rows):
    steps = Steps()
    check_against_zodb("empty")

    def create(site):
        root = api.content.create(container=site, type="Folder", id=ROOT, title="End to end")
        news = api.content.create(container=root, type="Folder", id="news", title="News folder")
        api.content.create(container=root, type="Document", id="doc-a", title="Apple pie recipe",
                           description="sweet and warm")
        api.content.create(container=root, type="Document", id="doc b", title="Banana bread")
        api.content.create(container=news, type="Document", id="note", title="Cherry note",
                           subject=("fruit",))

    steps.run("created", create)
    check_against_zodb("created")
    assert found_ids(SearchableText="apple") == ["/doc-a"]
    assert found_ids(Subject="fruit") == ["/news/note"]

    def edit(site):
        doc = site[ROOT]["doc-a"]
        doc.title = "Apricot pie recipe"
        doc.setSubject(("fruit", "pie"))
        doc.reindexObject()

    steps.run("edited", edit)
    check_against_zodb("edited")
    assert found_ids(SearchableText="apple") == []
    assert found_ids(SearchableText="apricot") == ["/doc-a"]
    assert found_ids(Subject="fruit") == ["/doc-a", "/news/note"]

    def publish(site):
        root = site[ROOT]
        for obj in (root, root["doc-a"], root["news"]):
            api.content.transition(obj, "publish")

    steps.run("published", publish)
    published = check_against_zodb("published")
    # The oracle is ZODB's security; this pins that the steps did what they meant.
    assert [row[0] for row in published[None]["restricted"]] == ["/conn/life", "/conn/life/doc-a", "/conn/life/news"]

    def share(site):
        doc = site[ROOT]["doc b"]
        api.user.grant_roles(username="member", obj=doc, roles=["Reader"])
        doc.reindexObjectSecurity()

    steps.run("local roles", share)
    shared = check_against_zodb("local roles")
    assert "/conn/life/doc b" in {row[0] for row in shared["member"]["restricted"]}
    assert "/conn/life/doc b" not in {row[0] for row in shared[None]["restricted"]}

    steps.run("renamed", lambda site: api.content.rename(obj=site[ROOT]["doc-a"], new_id="doc-apricot"))
    check_against_zodb("renamed")
    assert found_ids(SearchableText="apricot") == ["/doc-apricot"]
    assert found_ids(id="doc-a") == []

    steps.run("moved", lambda site: api.content.move(source=site[ROOT]["doc b"], target=site[ROOT]["news"]))
    moved = check_against_zodb("moved")
    # The local role travelled with the document.
    assert "/conn/life/news/doc b" in {row[0] for row in moved["member"]["restricted"]}
    assert found_ids(path={"query": "/conn/life/news", "depth": 1}) == ["/news/doc b", "/news/note"]

    def copy(site):
        copied = api.content.copy(source=site[ROOT]["news"], target=site[ROOT], id="news-copy")
        copied.title = "News copy"
        copied.reindexObject()

    steps.run("copied", copy)
    check_against_zodb("copied")
    assert found_ids(SearchableText="cherry") == ["/news-copy/note", "/news/note"]

    steps.run("deleted", lambda site: api.content.delete(obj=site[ROOT]["news-copy"]))
    check_against_zodb("deleted")
    assert found_ids(SearchableText="cherry") == ["/news/note"]

    def expire(site):
        doc = site[ROOT]["doc-apricot"]
        doc.setExpirationDate(DateTime() - 1)
        doc.reindexObject()

    steps.run("expired", expire)
    expired = check_against_zodb("expired")
    assert "/conn/life/doc-apricot" not in {row[0] for row in expired[None]["restricted"]}
    assert "/conn/life/doc-apricot" in {row[0] for row in expired["manager"]["restricted"]}

    # An aborted transaction whose batch was staged (a query read its own write) leaves no trace.
    with on_site(CONNECTED, commit=False) as site:
        api.content.create(container=site[ROOT], type="Document", id="aborted", title="Aborted")
        assert found_ids_in_transaction(site, "aborted") == ["/conn/life/aborted"]
        aborted_ids = list(transaction.get().extension["catalog_batch_ids"])
    assert found_ids(id="aborted") == []

    # Restart: close the database, open a new one on the same tables, forget every cache.
    before = check_against_zodb("before restart")
    old_storage = plone_sites["zodbDB"].storage
    db = plone_sites.restart()
    assert isinstance(db.storage, JsonbStorage) and db.storage is not old_storage
    query_cache.clear()
    after = check_against_zodb("after restart")
    assert after == before
    with on_site(CONNECTED, commit=False) as site:
        assert site[ROOT]["news"]["doc b"].Title() == "Banana bread"
        assert site[ROOT]["doc-apricot"].Subject() == ("fruit", "pie")

    def edit_after_restart(site):
        doc = site[ROOT]["news"]["doc b"]
        doc.title = "Banana bread, restarted"
        doc.reindexObject()

    steps.run("edited after restart", edit_after_restart)
    check_against_zodb("edited after restart")
    assert found_ids(SearchableText="restarted") == ["/news/doc b"]
    with on_site(CONNECTED, commit=False) as site:
        last_tid = u64(site[ROOT]["news"]["doc b"]._p_serial)

    steps.run("deleted the folder", lambda site: api.content.delete(obj=site[ROOT]))
    check_against_zodb("deleted the folder")
    assert found_ids(path="/conn/life") == []

    # The storage recorded each committed transaction's batch id, with increasing tids.
    recorded = outcome_rows(batch_id for _, batch_id in steps.committed)
    assert set(recorded) == {batch_id for _, batch_id in steps.committed}
    tids = [recorded[batch_id] for _, batch_id in steps.committed]
    assert tids == sorted(tids) and len(set(tids)) == len(steps.committed)
    assert tids[-2] == last_tid  # the tid of the ZODB transaction that made the change
    assert outcome_rows(aborted_ids) == {}
    with psycopg.connect(database_url) as conn:
        states = dict(conn.execute(
            "select batch_id, state from catalog_batch where batch_id = any(%s)",
            ([batch_id for _, batch_id in steps.committed] + aborted_ids,)).fetchall())
    assert {states[batch_id] for _, batch_id in steps.committed} == {"committed"}
    assert [states.get(batch_id) for batch_id in aborted_ids] == ["aborted"]


def found_ids_in_transaction(site, obj_id: str) -> list[str]:
    return [b.getPath() for b in site.portal_catalog.unrestrictedSearchResults(id=obj_id)]


def rest(app, user: str | None = "manager"):
    """plone.restapi through the Zope publisher (one transaction per request, as in production)."""
    browser = zope.Browser(app)
    browser.handleErrors = False
    headers = {"Accept": "application/json"}
    if user:
        headers["Authorization"] = f"Basic {user}:{PASSWORD}"
    return browser.testapp, headers


REST_PERMISSION = "plone.restapi: Use REST API"


@pytest.fixture
def rest_site(plone_sites):
    """The site ``conn`` with members allowed to use the REST API (plone.restapi's profile, which
    would grant it, is not installed in the layer); afterwards as it was, without the content."""
    with on_site(CONNECTED) as site:
        roles = [r["name"] for r in site.rolesOfPermission(REST_PERMISSION) if r["selected"]]
        acquire = bool(site.acquiredRolesAreUsedBy(REST_PERMISSION))
        site.manage_permission(REST_PERMISSION, ["Authenticated", "Manager"], acquire=True)
    yield plone_sites
    with on_site(CONNECTED) as site:
        site.manage_permission(REST_PERMISSION, roles, acquire=acquire)
        for obj_id in ("rest-doc", "notes.txt"):
            if obj_id in site.objectIds():
                api.content.delete(obj=site[obj_id])


def test_rest_api_with_a_blob_through_the_publisher(rest_site):
    url = f"http://nohost/{CONNECTED}"
    payload = b"plain notes with a quokkaword inside\n" * 5000  # ~190 kB, a real blob
    with zope.zopeApp() as app:
        client, headers = rest(app)
        created = client.post_json(url, {"@type": "Document", "id": "rest-doc", "title": "Rest document"},
                                   headers=headers, status=201)
        assert urlsplit(created.json["@id"]).path == f"/{CONNECTED}/rest-doc"
        client.patch_json(f"{url}/rest-doc", {"title": "Rest document zebrafied"}, headers=headers, status=204)
        client.post_json(f"{url}/rest-doc/@workflow/publish", {}, headers=headers, status=200)
        client.post_json(url, {"@type": "File", "id": "notes.txt", "title": "Notes", "file": {
            "data": base64.b64encode(payload).decode(), "encoding": "base64",
            "filename": "notes.txt", "content-type": "text/plain"}}, headers=headers, status=201)

        # A member (the REST API's permission is not given to anonymous on this site).
        member, member_headers = rest(app, user="member")
        found = member.get(f"{url}/@search", {"SearchableText": "zebrafied"}, headers=member_headers).json
        assert [(urlsplit(item["@id"]).path, item["title"]) for item in found["items"]] == [
            (f"/{CONNECTED}/rest-doc", "Rest document zebrafied")]
        # Found by a word of the file's content; by the member exactly if ZODB lets the member view it.
        found = client.get(f"{url}/@search", {"SearchableText": "quokkaword"}, headers=headers).json
        assert [urlsplit(item["@id"]).path for item in found["items"]] == [f"/{CONNECTED}/notes.txt"]
        with on_site(CONNECTED, user="member", commit=False) as site:
            member_may_view = bool(getSecurityManager().checkPermission("View", site["notes.txt"]))
        assert member.get(f"{url}/@search", {"SearchableText": "quokkaword"},
                          headers=member_headers).json["items_total"] == int(member_may_view)

    rest_site.restart()
    query_cache.clear()
    with zope.zopeApp() as app:
        client, headers = rest(app)
        # The blob comes back from PostgreSQL into the new storage's (empty) blob cache.
        assert client.get(f"{url}/notes.txt/@@download/file", headers=headers).body == payload
        client.delete(f"{url}/rest-doc", headers=headers, status=204)
        found = client.get(f"{url}/@search", {"SearchableText": "zebrafied"}, headers=headers).json
        assert found["items_total"] == 0
    with on_site(CONNECTED, commit=False) as site:
        assert site["notes.txt"].file._blob._p_jar.db().storage is rest_site["zodbDB"].storage
        assert isinstance(rest_site["zodbDB"].storage, JsonbStorage)
