"""plone.restapi's ``@search`` on a stock Plone (ZCatalog) and the service's ``/{catalog}/@search``
on the same content written through the connector answer the same: the same ``items_total``, the
same items in the same order, the same keys and values, the same batching links (the URL bases
mapped: the stock site is /plone, the connected one /conn), as Anonymous and as a member.

Both sites get the same objects with the same UIDs and dates, so every metadata value matches.
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlencode

import httpx
import pytest
from DateTime import DateTime
from plone import api
from plone.testing import zope
from plone.uuid.interfaces import IMutableUUID

from tests.connector.restapi_compare import difference, grant_restapi_on_stock, restore_restapi_on_stock
from tests.connector.sites import CONNECTED, PASSWORD, SITES, STOCK, delete_from, on_site, service_catalog_id

pytestmark = [pytest.mark.slow, pytest.mark.plone]

ROOT = "rc"
BASE = f"/{STOCK}/{ROOT}"
DAY = "2025-03-01"
USERS = (None, "member")

CONTENT = [
    # (path in ROOT, type, title, subjects, description, state)
    ("folder-a", "Folder", "Folder A", (), "", "published"),
    ("folder-a/sub", "Folder", "Sub folder", (), "", "published"),
    ("folder-a/sub/deep", "Document", "Deep page alpha", ("blue",), "", "published"),
    ("folder-a/private", "Document", "Private alpha", ("red",), "", "private"),
    ("doc-1", "Document", "Alpha document", ("red",), "gamma delta", "published"),
    ("doc 2", "Document", "Beta 10 document", ("red", "blue"), "", "private"),
    ("d%c_é", "Document", "Beta 9 documént", ("blue",), "", "published"),
    ("news", "News Item", "Some news alpha", ("green",), "", "published"),
    ("old-news", "News Item", "Expired news", (), "", "published"),
    ("hidden", "Document", "Hidden page", (), "not in navigation", "published"),
    ("collection-ish", "Document", "Zeta page", ("red", "green"), "", "published"),
]


def build(site):
    root = api.content.create(container=site, type="Folder", id=ROOT, title="Compatibility")
    api.content.transition(root, "publish")
    objects = [root]
    for number, (path, portal_type, title, subjects, description, state) in enumerate(CONTENT):
        parent_path, _, object_id = path.rpartition("/")
        parent = root.unrestrictedTraverse(parent_path) if parent_path else root
        obj = api.content.create(container=parent, type=portal_type, id=object_id, title=title,
                                 subject=subjects, description=description)
        if state == "published":
            api.content.transition(obj, "publish")
        objects.append(obj)
        IMutableUUID(obj).set(f"c0ffee{number:026x}")
    IMutableUUID(root).set("c0ffee" + "f" * 26)
    root["hidden"].exclude_from_nav = True
    api.user.grant_roles(username="member", obj=root["doc 2"], roles=["Reader"])
    root["doc 2"].reindexObjectSecurity()
    # Dates a minute apart, whole seconds, the same in both sites.
    for minutes, obj in enumerate(objects):
        obj.creation_date = DateTime(f"{DAY}T09:{minutes:02d}:00+00:00")
        obj.effective_date = DateTime(f"{DAY}T08:{minutes:02d}:00+00:00")
    root["old-news"].expiration_date = DateTime("2025-04-01T00:00:00+00:00")
    for minutes, obj in enumerate(objects):
        obj.reindexObject()  # a full reindex sets the modification date: set it after
        obj.modification_date = DateTime(f"{DAY}T10:{59 - minutes:02d}:00+00:00")
        obj.reindexObject(idxs=["modified"])


@pytest.fixture(scope="module")
def compared_sites(plone_sites, catalog_service):
    for name in SITES:
        with on_site(name) as site:
            build(site)
    saved = grant_restapi_on_stock()
    catalog_id = service_catalog_id(CONNECTED)
    with on_site(CONNECTED, commit=False) as site:
        type_titles = {fti.getId(): str(fti.Title()) for fti in site.portal_types.objectValues()}
        member = site.acl_users.getUserById("member")
        principals = site.portal_catalog._listAllowedRolesAndUsers(member)
    with httpx.Client(base_url=catalog_service.url,
                      headers={"Authorization": f"Bearer {catalog_service.admin_token}"}) as admin:
        r = admin.patch(f"/catalogs/{catalog_id}/settings", json={
            "public_url": f"http://nohost/{CONNECTED}", "site_path": f"/{CONNECTED}", "type_titles": type_titles})
        assert r.status_code == 200, r.text
        token = admin.post(f"/catalogs/{catalog_id}/tokens", json={"principals": principals}).json()["token"]
    yield catalog_id, {"member": token}
    restore_restapi_on_stock(saved)
    for name in SITES:
        delete_from(name, ROOT)


def sub(path: str = "") -> str:
    return BASE + path


# (label, query string pairs); paths name the stock site and are mapped for the connected one.
REQUESTS = [
    ("subtree", [("path.query", sub())]),
    ("contents", [("path.query", sub()), ("path.depth:int", "1"), ("sort_on", "getObjPositionInParent")]),
    ("contents depth as text", [("path.query", sub()), ("path.depth", "1"), ("sort_on", "getObjPositionInParent")]),
    ("all metadata", [("path.query", sub()), ("sort_on", "sortable_title"), ("metadata_fields", "_all")]),
    ("some metadata", [("path.query", sub()), ("sort_on", "sortable_title"), ("metadata_fields", "Subject"),
                       ("metadata_fields", "created"), ("metadata_fields", "UID")]),
    ("metadata list syntax", [("path.query", sub()), ("sort_on", "id"), ("metadata_fields:list", "effective"),
                              ("metadata_fields:list", "exclude_from_nav")]),
    ("portal_type", [("path.query", sub()), ("portal_type", "Document"), ("sort_on", "sortable_title")]),
    ("portal_type list", [("path.query", sub()), ("portal_type:list", "Document"), ("portal_type:list", "News Item"),
                          ("sort_on", "sortable_title")]),
    ("reverse title", [("path.query", sub()), ("sort_on", "sortable_title"), ("sort_order", "reverse")]),
    ("newest first", [("path.query", sub()), ("sort_on", "created"), ("sort_order", "descending")]),
    ("two sort keys", [("path.query", sub()), ("sort_on:list", "portal_type"), ("sort_on:list", "sortable_title"),
                       ("sort_order", "ascending")]),
    ("page 2", [("path.query", sub()), ("sort_on", "sortable_title"), ("b_size", "3"), ("b_start", "3")]),
    ("page 1 int", [("path.query", sub()), ("sort_on", "sortable_title"), ("b_size:int", "4")]),
    ("last page", [("path.query", sub()), ("sort_on", "sortable_title"), ("b_size", "4"), ("b_start", "8")]),
    ("past the end", [("path.query", sub()), ("sort_on", "sortable_title"), ("b_size", "3"), ("b_start", "99")]),
    ("start alone", [("path.query", sub()), ("sort_on", "sortable_title"), ("b_start", "2")]),
    ("sort_limit", [("path.query", sub()), ("sort_on", "sortable_title"), ("sort_limit", "3")]),
    ("subject", [("path.query", sub()), ("Subject", "red"), ("sort_on", "sortable_title")]),
    ("subjects and", [("path.query", sub()), ("Subject.query:list", "red"), ("Subject.query:list", "blue"),
                      ("Subject.operator", "and")]),
    ("subjects or", [("path.query", sub()), ("Subject:list", "green"), ("Subject:list", "blue"),
                     ("sort_on", "sortable_title")]),
    ("review_state", [("path.query", sub()), ("review_state", "published"), ("sort_on", "sortable_title")]),
    ("not in navigation", [("path.query", sub()), ("exclude_from_nav:boolean", "True")]),
    ("in navigation, text false", [("path.query", sub()), ("exclude_from_nav", "false"), ("sort_on", "sortable_title")]),
    ("folderish", [("path.query", sub()), ("is_folderish", "true"), ("sort_on", "sortable_title")]),
    ("created after", [("path.query", sub()), ("created.query", f"{DAY}T09:05:00+00:00"), ("created.range", "min"),
                       ("sort_on", "created")]),
    ("created between", [("path.query", sub()), ("created.query:list", f"{DAY}T09:02:00+00:00"),
                         ("created.query:list", f"{DAY}T09:07:00+00:00"), ("created.range", "min:max"),
                         ("sort_on", "created")]),
    ("created before :date", [("path.query", sub()), ("created.query:date", "2025/03/01 09:04:00 GMT+0"),
                              ("created.range", "max"), ("sort_on", "created")]),
    ("modified after", [("path.query", sub()), ("modified.query", f"{DAY}T10:50:00+00:00"), ("modified.range", "min"),
                        ("sort_on", "modified")]),
    ("effective", [("path.query", sub()), ("effective.query", f"{DAY}T08:06:00+00:00"), ("effective.range", "max"),
                   ("sort_on", "effective")]),
    ("text", [("path.query", sub()), ("SearchableText", "alpha"), ("sort_on", "sortable_title")]),
    ("text relevance", [("path.query", sub()), ("SearchableText", "alpha document")]),
    ("text glob", [("path.query", sub()), ("SearchableText", "alp*"), ("sort_on", "sortable_title")]),
    ("text in parentheses", [("path.query", sub()), ("SearchableText", "(beta)"), ("sort_on", "sortable_title")]),
    ("text star", [("path.query", sub()), ("SearchableText", "*")]),
    ("title", [("path.query", sub()), ("Title", "document"), ("sort_on", "sortable_title")]),
    ("description", [("path.query", sub()), ("Description", "gamma")]),
    ("navtree", [("path.query", sub("/folder-a/sub")), ("path.navtree:boolean", "True"), ("sort_on", "sortable_title")]),
    ("depth 0", [("path.query", sub("/folder-a")), ("path.depth:int", "0")]),
    ("two paths", [("path.query:list", sub("/folder-a")), ("path.query:list", sub("/news")),
                   ("sort_on", "sortable_title")]),
    ("uid", [("UID", "c0ffee" + "0" * 25 + "4")]),
    ("id", [("path.query", sub()), ("getId", "doc-1")]),
    ("odd id", [("path.query", sub()), ("id", "d%c_é"), ("metadata_fields", "_all")]),
    ("batched all metadata", [("path.query", sub()), ("sort_on", "sortable_title"), ("b_size", "2"), ("b_start", "4"),
                              ("metadata_fields", "_all")]),
]


def connected(text: str) -> str:
    return text.replace(f"/{STOCK}/", f"/{CONNECTED}/")


def stock_answer(user: str | None, pairs) -> object:
    with zope.zopeApp() as app:
        browser = zope.Browser(app)
        browser.handleErrors = False
        browser.addHeader("Accept", "application/json")
        if user:
            browser.addHeader("Authorization", f"Basic {user}:{PASSWORD}")
        browser.open(f"http://nohost/{STOCK}/@search?{urlencode(pairs)}")
        return json.loads(browser.contents)


def service_answer(service_url: str, catalog_id: str, token: str | None, pairs) -> object:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    query = urlencode([(k, connected(v)) for k, v in pairs])
    r = httpx.get(f"{service_url}/{catalog_id}/@search?{query}", headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    # Map the connected site's addresses back to the stock site's.
    text = r.text.replace(f"{service_url}/{catalog_id}/@search", f"http://nohost/{STOCK}/@search")
    text = re.sub(rf"(/|%2F){CONNECTED}(?=/|%2F|\"|&)", rf"\g<1>{STOCK}", text)
    return json.loads(text)


@pytest.mark.parametrize("user", USERS, ids=lambda u: u or "anonymous")
def test_same_answers_as_plone_restapi(compared_sites, catalog_service, user):
    catalog_id, tokens = compared_sites
    differences = []
    compared = 0
    for label, pairs in REQUESTS:
        stock = stock_answer(user, pairs)
        ours = service_answer(catalog_service.url, catalog_id, tokens.get(user), pairs)
        compared += 1
        found = difference(stock, ours)
        if found:
            differences.append((label, found))
    assert compared == len(REQUESTS) >= 40
    for label, found in differences:
        print(label, found[:5])
    assert differences == []


def test_the_comparison_sees_content(compared_sites, catalog_service):
    """The answers compared above are not empty ones: the anonymous subtree holds the published,
    effective objects, the member also sees the one shared with them."""
    catalog_id, tokens = compared_sites
    anonymous = service_answer(catalog_service.url, catalog_id, None, [("path.query", sub())])
    member = service_answer(catalog_service.url, catalog_id, tokens["member"], [("path.query", sub())])
    assert anonymous["items_total"] == 1 + sum(1 for c in CONTENT if c[5] == "published") - 1  # old-news expired
    assert member["items_total"] == anonymous["items_total"] + 1
