"""plone.restapi's ``@querystring-search`` on a stock Plone (ZCatalog) and the service's
``/{catalog}/@querystring-search`` on the same content written through the connector answer the
same: the same ``items_total``, the same items in the same order, the same keys and values, the
same batching links (the URL bases mapped: the stock site is /plone, the connected one /conn), as
Anonymous and as a member, at the site root and at a context, POST and GET.

Relative dates run with the real "now" on both sides: the content is dated 2025-03-01 and every
relative criterion's bounds lie years or days away from it, so the answers do not depend on the
minute the test runs (tests/connector/test_querystring.py compares the translation with a fixed
"now" for every operation).
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote, urlencode

import httpx
import pytest
from DateTime import DateTime
from plone import api
from plone.testing import zope
from plone.uuid.interfaces import IMutableUUID

from tests.connector.restapi_compare import difference, grant_restapi_on_stock, restore_restapi_on_stock
from tests.connector.sites import CONNECTED, PASSWORD, SITES, STOCK, delete_from, on_site, service_catalog_id

pytestmark = [pytest.mark.slow, pytest.mark.plone]

P = "plone.app.querystring.operation."
ROOT = "rq"
DAY = "2025-03-01"
USERS = (None, "member")
UID_PREFIX = "c0ffee01"

CONTENT = [
    # (path in ROOT, type, title, subjects, description, state, creator)
    ("folder-a", "Folder", "Folder A", (), "", "published", None),
    ("folder-a/sub", "Folder", "Sub folder", (), "", "published", None),
    ("folder-a/sub/deep", "Document", "Deep page alpha", ("blue",), "", "published", "member"),
    ("folder-a/private", "Document", "Private alpha", ("red",), "", "private", None),
    ("folder-a/page-x", "Document", "Xylophone page", ("red", "blue"), "", "published", "editor"),
    ("doc-1", "Document", "Alpha document", ("red",), "gamma delta", "published", "member"),
    ("doc 2", "Document", "Beta 10 document", ("red", "blue"), "", "private", "member"),
    ("d%c_é", "Document", "Beta 9 documént", ("blue",), "", "published", None),
    ("news", "News Item", "Some news alpha", ("green",), "", "published", "editor"),
    ("old-news", "News Item", "Expired news", (), "", "published", None),
    ("hidden", "Document", "Hidden page", (), "not in navigation", "published", None),
    ("zeta", "Document", "Zeta page", ("red", "green"), "", "published", "member"),
]


def uid_of(number: int) -> str:
    return f"{UID_PREFIX}{number:024x}"


ROOT_UID = UID_PREFIX + "f" * 24
UIDS = {path: uid_of(number) for number, (path, *_) in enumerate(CONTENT)}


def build(site):
    root = api.content.create(container=site, type="Folder", id=ROOT, title="Querystring compatibility")
    api.content.transition(root, "publish")
    objects = [root]
    for number, (path, portal_type, title, subjects, description, state, creator) in enumerate(CONTENT):
        parent_path, _, object_id = path.rpartition("/")
        parent = root.unrestrictedTraverse(parent_path) if parent_path else root
        obj = api.content.create(container=parent, type=portal_type, id=object_id, title=title,
                                 subject=subjects, description=description)
        if state == "published":
            api.content.transition(obj, "publish")
        if creator:
            obj.setCreators((creator,))
        objects.append(obj)
        IMutableUUID(obj).set(uid_of(number))
    IMutableUUID(root).set(ROOT_UID)
    root["hidden"].exclude_from_nav = True
    api.user.grant_roles(username="member", obj=root["doc 2"], roles=["Reader"])
    root["doc 2"].reindexObjectSecurity()
    for minutes, obj in enumerate(objects):
        obj.creation_date = DateTime(f"{DAY}T09:{minutes:02d}:00+00:00")
        obj.effective_date = DateTime(f"{DAY}T08:{minutes:02d}:00+00:00")
    root["old-news"].expiration_date = DateTime("2025-04-01T00:00:00+00:00")
    for minutes, obj in enumerate(objects):
        obj.reindexObject()
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
        member = site.acl_users.getUserById("member")
        principals = site.portal_catalog._listAllowedRolesAndUsers(member)
    with httpx.Client(base_url=catalog_service.url,
                      headers={"Authorization": f"Bearer {catalog_service.admin_token}"}) as admin:
        # site_path, type_titles and timezone are the connector's (it set them at install); the
        # public address is the stock site's twin, to compare item URLs.
        settings = admin.get(f"/catalogs/{catalog_id}/settings").json()
        assert settings["site_path"] == f"/{CONNECTED}" and settings["type_titles"]["Document"] == "Page"
        r = admin.patch(f"/catalogs/{catalog_id}/settings", json={"public_url": f"http://nohost/{CONNECTED}"})
        assert r.status_code == 200, r.text
        # Plone lets anyone's query ask for inactive content (showInactive): a token that may.
        token = admin.post(f"/catalogs/{catalog_id}/tokens",
                           json={"principals": principals, "show_inactive": True}).json()["token"]
    yield catalog_id, {"member": token}
    restore_restapi_on_stock(saved)
    for name in SITES:
        delete_from(name, ROOT)


def rows(*criteria) -> list[dict]:
    found = []
    for index, operation, *value in criteria:
        row = {"i": index, "o": P + operation}
        if value:
            row["v"] = value[0]
        found.append(row)
    return found


HERE = ("path", "string.absolutePath", f"/{ROOT}")
TITLE = {"sort_on": "sortable_title"}

# (label, context below ROOT or None for the site root, body, URL parameters for POST)
REQUESTS = [
    ("types any", None, {"query": rows(HERE, ("portal_type", "selection.any", ["Document"])), **TITLE}, None),
    ("types any two", None, {"query": rows(HERE, ("portal_type", "selection.any", ["Document", "News Item"])),
                             **TITLE}, None),
    ("type is", None, {"query": rows(HERE, ("portal_type", "selection.is", ["Folder"])), **TITLE}, None),
    ("state none", None, {"query": rows(HERE, ("review_state", "selection.none", ["private"])), **TITLE}, None),
    ("subjects all", None, {"query": rows(HERE, ("Subject", "selection.all", ["red", "blue"])), **TITLE}, None),
    ("subject contains", None, {"query": rows(HERE, ("Subject", "list.contains", ["green"])), **TITLE}, None),
    ("string is", None, {"query": rows(HERE, ("portal_type", "string.is", "News Item")), **TITLE}, None),
    ("string is not", None, {"query": rows(HERE, ("portal_type", "string.isNot", "Document")), **TITLE}, None),
    ("text", None, {"query": rows(HERE, ("SearchableText", "string.contains", "alpha")), **TITLE}, None),
    ("text prefix", None, {"query": rows(HERE, ("SearchableText", "string.contains", "docu")), **TITLE}, None),
    ("text phrase", None, {"query": rows(HERE, ("SearchableText", "string.contains", '"alpha document"'))}, None),
    ("text relevance", None, {"query": rows(HERE, ("SearchableText", "string.contains", "Xylophone"))}, None),
    ("title", None, {"query": rows(HERE, ("Title", "string.contains", "beta")), **TITLE}, None),
    ("folderish", None, {"query": rows(HERE, ("is_folderish", "boolean.isTrue")), **TITLE}, None),
    ("in navigation", None, {"query": rows(HERE, ("exclude_from_nav", "boolean.isFalse")), **TITLE}, None),
    ("my content", None, {"query": rows(HERE, ("Creator", "string.currentUser")), **TITLE}, None),
    ("inactive for managers", None, {"query": rows(HERE, ("show_inactive", "string.showInactive", ["Manager"])),
                                     **TITLE}, None),
    ("inactive for members", None, {"query": rows(HERE, ("show_inactive", "string.showInactive", ["Member"])),
                                    **TITLE}, None),
    ("created before", None, {"query": rows(HERE, ("created", "date.lessThan", f"{DAY}T09:05:00Z")),
                              "sort_on": "created"}, None),
    ("created after", None, {"query": rows(HERE, ("created", "date.largerThan", f"{DAY}T09:05:00+00:00")),
                             "sort_on": "created"}, None),
    ("created between", None, {"query": rows(HERE, ("created", "date.between",
                                                    [f"{DAY}T09:02:00Z", f"{DAY}T09:07:00Z"])),
                               "sort_on": "created"}, None),
    ("created before today", None, {"query": rows(HERE, ("created", "date.beforeToday")), "sort_on": "created"},
     None),
    ("created after today", None, {"query": rows(HERE, ("created", "date.afterToday"))}, None),
    ("created today", None, {"query": rows(HERE, ("created", "date.today"))}, None),
    ("expires after today", None, {"query": rows(HERE, ("expires", "date.afterToday")), "sort_on": "created"},
     None),
    ("last 5000 days", None, {"query": rows(HERE, ("created", "date.largerThanRelativeDate", "5000")),
                              "sort_on": "modified"}, None),
    ("next -5000 days", None, {"query": rows(HERE, ("created", "date.lessThanRelativeDate", -5000)),
                               "sort_on": "modified"}, None),
    ("before 30 days ago", None, {"query": rows(HERE, ("created", "date.beforeRelativeDate", "30")),
                                  "sort_on": "created", "sort_order": "descending"}, None),
    ("after 5000 days ago", None, {"query": rows(HERE, ("modified", "date.afterRelativeDate", "-5000")),
                                   "sort_on": "modified"}, None),
    ("path depth 1", None, {"query": rows(("path", "string.absolutePath", f"/{ROOT}/folder-a::1")), **TITLE}, None),
    ("path depth 0", None, {"query": rows(("path", "string.absolutePath", f"/{ROOT}/folder-a::0"))}, None),
    ("physical path", None, {"query": rows(("path", "string.absolutePath", f"/{STOCK}/{ROOT}/folder-a")),
                             **TITLE}, None),
    ("path by uid", None, {"query": rows(("path", "string.absolutePath", f"{UIDS['folder-a']}::1")), **TITLE},
     None),
    ("navigation path", None, {"query": rows(("path", "string.path", f"/{ROOT}/folder-a/sub")), **TITLE}, None),
    ("two paths", None, {"query": rows(("path", "string.absolutePath", f"/{ROOT}/folder-a/sub"),
                                       ("path", "string.absolutePath", f"/{ROOT}/news")), **TITLE}, None),
    ("reference by path", None, {"query": rows(HERE, ("UID", "reference.is", f"/{ROOT}/doc-1"))}, None),
    ("reference by uid", None, {"query": rows(HERE, ("UID", "reference.is", UIDS["zeta"]))}, None),
    ("reference to a private page", None, {"query": rows(HERE, ("UID", "reference.is", f"/{ROOT}/doc 2")),
                                           **TITLE}, None),
    ("relative here", "folder-a", {"query": rows(("path", "string.relativePath", ".")), **TITLE}, None),
    ("relative children", "folder-a", {"query": rows(("path", "string.relativePath", ".::1")),
                                       "sort_on": "getObjPositionInParent"}, None),
    ("relative parent", "folder-a/sub", {"query": rows(("path", "string.relativePath", "..::1")), **TITLE}, None),
    ("relative sibling", "folder-a/sub/deep", {"query": rows(("path", "string.relativePath", "../../page-x"))},
     None),
    ("relative above the site", "doc-1", {"query": rows(("path", "string.relativePath", "../../../..::1")),
                                          **TITLE}, None),
    ("context types", "folder-a", {"query": rows(("portal_type", "selection.any", ["Document"])), **TITLE}, None),
    ("context of an odd id", "d%c_é", {"query": rows(("path", "string.relativePath", "..::1")), **TITLE}, None),
    ("limit", None, {"query": rows(HERE), **TITLE, "limit": 3}, None),
    ("limit pages", None, {"query": rows(HERE), **TITLE, "limit": "5", "b_size": 2}, None),
    ("limit last page", None, {"query": rows(HERE), **TITLE, "limit": 5, "b_size": 2, "b_start": 4}, None),
    ("limit past the end", None, {"query": rows(HERE), **TITLE, "limit": 3, "b_start": 7}, None),
    ("big limit", None, {"query": rows(HERE), **TITLE, "limit": 1000, "b_size": 4}, None),
    ("reverse is ascending", None, {"query": rows(HERE), **TITLE, "sort_order": "reverse"}, None),
    ("descending", None, {"query": rows(HERE), **TITLE, "sort_order": "descending"}, None),
    ("unknown sort", None, {"query": rows(HERE, ("getId", "string.is", "zeta")), "sort_on": "nope"}, None),
    ("page 2", None, {"query": rows(HERE), **TITLE, "b_size": 3, "b_start": 3}, None),
    ("page as text", None, {"query": rows(HERE), **TITLE, "b_size": "4", "b_start": "8"}, None),
    ("past the end", None, {"query": rows(HERE), **TITLE, "b_size": 3, "b_start": 99}, None),
    ("start in the URL", None, {"query": rows(HERE), **TITLE, "b_size": 3}, {"b_start": "3"}),
    ("all metadata", None, {"query": rows(HERE), **TITLE, "metadata_fields": "_all"}, None),
    ("some metadata", None, {"query": rows(HERE), **TITLE, "metadata_fields": ["Subject", "UID", "created"]},
     None),
    ("batched metadata", None, {"query": rows(HERE), **TITLE, "b_size": 2, "b_start": 2,
                                "metadata_fields": ["effective", "exclude_from_nav", "getPath"]}, None),
    ("Volto's block data", None, {"query": rows(HERE, ("Subject", "selection.any", ["red"])), **TITLE,
                                  "block": "b-1", "@type": "listing", "fullobjects": False}, None),
    ("unknown index", None, {"query": rows(HERE, ("nosuchindex", "string.is", "x")), **TITLE}, None),
]
GET_REQUESTS = ["types any", "limit pages", "relative children", "page 2", "my content", "all metadata"]


def connected(text: str) -> str:
    return text.replace(f"/{STOCK}/", f"/{CONNECTED}/")


def _where(context: str | None, base: str) -> str:
    return f"{base}/{ROOT}/{quote(context)}/@querystring-search" if context else f"{base}/@querystring-search"


def stock_answer(user, context, body, params, method="POST"):
    with zope.zopeApp() as app:
        browser = zope.Browser(app)
        browser.handleErrors = False
        browser.addHeader("Accept", "application/json")
        if user:
            browser.addHeader("Authorization", f"Basic {user}:{PASSWORD}")
        url = _where(context, f"http://nohost/{STOCK}")
        if method == "GET":
            browser.open(f"{url}?{urlencode({'query': json.dumps(body)})}")
        else:
            browser.post(f"{url}?{urlencode(params)}" if params else url, json.dumps(body), "application/json")
        return json.loads(browser.contents)


def service_answer(service_url, catalog_id, token, context, body, params, method="POST"):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = _where(context, f"{service_url}/{catalog_id}")
    text = connected(json.dumps(body))
    if method == "GET":
        r = httpx.get(f"{url}?{urlencode({'query': text})}", headers=headers, timeout=30)
    else:
        r = httpx.post(url, params=params, content=text, headers={**headers, "Content-Type": "application/json"},
                       timeout=30)
    assert r.status_code == 200, r.text
    answer = r.text.replace(f"{service_url}/{catalog_id}", f"http://nohost/{STOCK}")
    answer = re.sub(rf"(/|%2F){CONNECTED}(?=/|%2F|\"|&|%22)", rf"\g<1>{STOCK}", answer)
    return json.loads(answer)


def compare(catalog_service, catalog_id, tokens, user, requests, method):
    differences, answered = [], 0
    for label, context, body, params in requests:
        stock = stock_answer(user, context, body, params, method)
        ours = service_answer(catalog_service.url, catalog_id, tokens.get(user), context, body, params, method)
        answered += bool(stock["items"])
        found = difference(stock, ours)
        if found:
            differences.append((label, found))
    for label, found in differences:
        print(label, found[:5])
    return differences, answered


@pytest.mark.parametrize("user", USERS, ids=lambda u: u or "anonymous")
def test_same_answers_as_plone_restapi(compared_sites, catalog_service, user):
    catalog_id, tokens = compared_sites
    differences, answered = compare(catalog_service, catalog_id, tokens, user, REQUESTS, "POST")
    assert len(REQUESTS) >= 60
    assert differences == []
    # The answers compared are not empty ones (a few ask for nothing on purpose: today, past the end).
    assert answered >= len(REQUESTS) - 6, answered


@pytest.mark.parametrize("user", USERS, ids=lambda u: u or "anonymous")
def test_same_answers_to_get(compared_sites, catalog_service, user):
    catalog_id, tokens = compared_sites
    chosen = [r for r in REQUESTS if r[0] in GET_REQUESTS]
    assert len(chosen) == len(GET_REQUESTS)
    differences, answered = compare(catalog_service, catalog_id, tokens, user, chosen, "GET")
    assert differences == []
    assert answered >= len(chosen) - (user is None)  # Anonymous has no content of their own


def test_the_comparison_sees_each_users_content(compared_sites, catalog_service):
    """Anonymous sees the published, effective objects; the member also the private page shared
    with them, and their own content by currentUser."""
    catalog_id, tokens = compared_sites
    everything = {"query": rows(HERE), **TITLE, "b_size": 50}
    anonymous = service_answer(catalog_service.url, catalog_id, None, None, everything, None)
    member = service_answer(catalog_service.url, catalog_id, tokens["member"], None, everything, None)
    published = 1 + sum(1 for c in CONTENT if c[5] == "published") - 1  # old-news has expired
    assert anonymous["items_total"] == published
    assert member["items_total"] == published + 1
    mine = {"query": rows(HERE, ("Creator", "string.currentUser")), **TITLE}
    titles = [i["title"] for i in service_answer(catalog_service.url, catalog_id, tokens["member"], None, mine,
                                                  None)["items"]]
    assert titles == sorted((c[2] for c in CONTENT if c[6] == "member"), key=str.lower)
