"""Facet counts on the search routes, on a real PostgreSQL: counts of the whole result per index
value, disjunctive for an index the query names, under the caller's security and effective-date
filter, from staged batches, refreshed after commits; bad facet requests answered with 4xx
problem details. The counts are checked against ZCatalog in test_differential_facets.py."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from catalog_schemas.api import CatalogCreate, IndexDeclaration
from tests.service.test_api import NOW, UNRESTRICTED, commit, entry

D = IndexDeclaration
INDEXES = [
    D(name="allowedRolesAndUsers", type="KeywordIndex"),
    D(name="portal_type", type="FieldIndex"),
    D(name="review_state", type="FieldIndex"),
    D(name="Subject", type="KeywordIndex"),
    D(name="path", type="ExtendedPathIndex"),
    D(name="effectiveRange", type="DateRangeIndex", since_field="effective", until_field="expires"),
    D(name="modified", type="DateIndex"),
    D(name="SearchableText", type="ZCTextIndex"),
    D(name="getObjPositionInParent", type="GopipIndex"),
    D(name="is_folderish", type="BooleanIndex"),
    D(name="rating", type="FieldIndex", value_type="number"),
    D(name="id", type="FieldIndex"),
]


def doc(uid, portal_type="Document", state="published", subjects=(), allowed=("Anonymous",), folderish=False,
        rating=None, **kw):
    e = entry(uid, f"/plone/{uid}", portal_type=portal_type, allowed=allowed, subjects=subjects, **kw)
    e["values"].update({"review_state": state, "is_folderish": folderish})
    if rating is not None:
        e["values"]["rating"] = rating
    return e


CONTENT = [
    doc("a", subjects=["plone", "news"], text="garden party", rating=3),
    doc("b", subjects=["plone"], text="garden tools", folderish=True, rating=3.0),
    doc("c", portal_type="News Item", subjects=["news"], text="garden news", rating=5),
    doc("d", portal_type="News Item", state="private", subjects=["secret"], allowed=("Manager", "user:bob"),
        text="garden secret"),
    doc("e", portal_type="Event", subjects=["plone"], text="garden expired", expires=NOW - timedelta(days=1)),
    doc("f", portal_type="Event", subjects=[], text="kitchen", effective=NOW + timedelta(days=3)),
]


@pytest.fixture
def admin(live_service):
    with live_service.client() as client:
        yield client


@pytest.fixture(scope="module")
def faceted(live_service):
    """A catalog with CONTENT; yields (name, connector token)."""
    name = "f-" + uuid.uuid4().hex[:10]
    with live_service.client() as client:
        response = client.post("/catalogs", json=CatalogCreate(id=name, indexes=INDEXES, metadata=["Title"]).model_dump())
        assert response.status_code == 201, response.text
        commit(client, name, CONTENT)
        yield name, response.json()["token"]
        client.delete(f"/catalogs/{name}")


def counts(answer, index):
    return {item["value"]: item["count"] for item in answer["facets"][index]["values"]}


def post(client, name, body, headers=UNRESTRICTED, status=200):
    response = client.post(f"/catalogs/{name}/query", json=body, headers=headers)
    assert response.status_code == status, response.text
    return response.json()


def test_counts_cover_the_whole_result_not_the_page(admin, faceted):
    name, _ = faceted
    answer = post(admin, name, {"query": {"SearchableText": "garden"}, "b_size": 1,
                                "facets": ["portal_type", "Subject", "is_folderish", "rating"]})
    assert len(answer["items"]) == 1 and answer["items_total"] == 5
    assert counts(answer, "portal_type") == {"Document": 2, "News Item": 2, "Event": 1}
    # A keyword index counts every keyword of an object; objects without one count nowhere.
    assert counts(answer, "Subject") == {"plone": 3, "news": 2, "secret": 1}
    assert counts(answer, "is_folderish") == {False: 4, True: 1}
    # 3 and 3.0 are one value (ZCatalog: rating=3 finds both).
    assert counts(answer, "rating") == {3: 2, 5: 1}
    assert answer["facets"]["portal_type"]["distinct"] == 3
    # Most frequent first, ties in value order.
    assert [v["value"] for v in answer["facets"]["portal_type"]["values"]] == ["Document", "News Item", "Event"]


def test_an_index_the_query_names_is_counted_without_its_own_condition(admin, faceted):
    name, _ = faceted
    answer = post(admin, name, {"query": {"SearchableText": "garden", "portal_type": "News Item"},
                                "facets": ["portal_type", "Subject"]})
    assert answer["items_total"] == 2
    # What choosing another type would find, with the text query still applied...
    assert counts(answer, "portal_type") == {"Document": 2, "News Item": 2, "Event": 1}
    # ...while the other facets count the result as it is.
    assert counts(answer, "Subject") == {"news": 1, "secret": 1}


def test_counts_only_what_the_caller_may_see(live_service, faceted):
    name, token = faceted
    with live_service.client(token=False) as anonymous:
        response = anonymous.get("/search", params={"catalog": name, "SearchableText": "garden",
                                                    "facets": "portal_type,Subject"})
        assert response.status_code == 200, response.text
        answer = response.json()
    # Neither the private document nor the expired event (nor the future one) is counted.
    assert answer["items_total"] == 3
    assert counts(answer, "portal_type") == {"Document": 2, "News Item": 1}
    assert counts(answer, "Subject") == {"plone": 2, "news": 2}
    with live_service.client(token=token) as connector:
        bob = {"X-Catalog-Principals": '["user:bob", "Anonymous"]'}
        answer = post(connector, name, {"query": {"portal_type": "Document"}, "facets": ["portal_type"]}, headers=bob)
        assert counts(answer, "portal_type") == {"Document": 2, "News Item": 2}
        answer = post(connector, name, {"query": {"portal_type": "Document"}, "facets": ["portal_type"],
                                        "show_inactive": True}, headers=bob)
        assert counts(answer, "portal_type") == {"Document": 2, "News Item": 2, "Event": 2}


def test_limit_and_value_order(admin, faceted):
    name, _ = faceted
    body = {"query": {"path": "/plone"}, "facets": [{"index": "Subject", "limit": 2, "sort": "value"},
                                                    {"index": "portal_type", "limit": 1},
                                                    {"index": "review_state", "limit": 0}]}
    answer = post(admin, name, body)
    assert answer["facets"]["Subject"] == {"values": [{"value": "news", "count": 2}, {"value": "plone", "count": 3}],
                                           "distinct": 3}
    assert answer["facets"]["portal_type"]["values"] in ([{"value": "Document", "count": 2}],
                                                         [{"value": "Event", "count": 2}])
    assert answer["facets"]["portal_type"]["distinct"] == 3
    assert answer["facets"]["review_state"] == {"values": [], "distinct": 2}
    # In the order asked, and nothing when nothing matches.
    assert list(answer["facets"]) == ["Subject", "portal_type", "review_state"]
    empty = post(admin, name, {"query": {"portal_type": "Nothing"}, "facets": ["Subject"]})
    assert empty["facets"] == {"Subject": {"values": [], "distinct": 0}} and empty["items_total"] == 0


def test_get_search_takes_facet_parameters(live_service, faceted):
    name, _ = faceted
    with live_service.client(token=False) as anonymous:
        response = anonymous.get("/search", params=[("catalog", name), ("path", "/plone"), ("facets", "Subject"),
                                                    ("facets", "portal_type"), ("facet_limit", "1"),
                                                    ("facet_sort", "value")])
        assert response.status_code == 200, response.text
        facets = response.json()["facets"]
        assert facets == {"Subject": {"values": [{"value": "news", "count": 2}], "distinct": 2},
                          "portal_type": {"values": [{"value": "Document", "count": 2}], "distinct": 2}}
        without = anonymous.get("/search", params={"catalog": name, "path": "/plone"}).json()
        assert "facets" not in without


@pytest.mark.parametrize("facets, status, word", [
    (["nope"], 400, "no such index"),
    (["modified"], 400, "cannot be faceted"),
    (["SearchableText"], 400, "cannot be faceted"),
    (["path"], 400, "cannot be faceted"),
    (["effectiveRange"], 400, "cannot be faceted"),
    (["getObjPositionInParent"], 400, "cannot be faceted"),
    (["allowedRolesAndUsers"], 400, "principals"),
    (["Subject", "Subject"], 400, "twice"),
    ([{"index": "Subject", "limit": 1001}], 422, ""),
    ([{"index": "Subject", "sort": "random"}], 422, ""),
    (["x"] * 17, 422, ""),
])
def test_bad_facets_are_refused_with_problem_details(admin, faceted, facets, status, word):
    name, _ = faceted
    response = admin.post(f"/catalogs/{name}/query", json={"query": {}, "facets": facets}, headers=UNRESTRICTED)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert word in response.json().get("detail", "")


def test_bad_get_facet_parameters_are_400(live_service, faceted):
    name, _ = faceted
    with live_service.client(token=False) as anonymous:
        for params in ({"facets": "Subject", "facet_limit": "many"}, {"facets": "Subject", "facet_sort": "up"},
                       {"facets": "modified"}):
            response = anonymous.get("/search", params={"catalog": name, **params})
            assert response.status_code == 400, response.text
            assert response.headers["content-type"] == "application/problem+json"


def test_counts_follow_commits_and_see_staged_batches(admin, faceted):
    name, _ = faceted
    body = {"query": {"portal_type": "Document"}, "facets": ["Subject"]}
    before = post(admin, name, body)
    assert post(admin, name, body) == before  # the second from the cache, the same
    commit(admin, name, [doc("g", subjects=["plone", "new"])])
    try:
        after = post(admin, name, body)
        assert counts(after, "Subject") == {**counts(before, "Subject"), "plone": 3, "new": 1}
        assert after["items_total"] == before["items_total"] + 1
        staged = admin.post(f"/catalogs/{name}/batches", params={"stage": "true"},
                            json={"batch_id": "staged-" + uuid.uuid4().hex, "entries": [
                                {"op": "unindex", "uid": "g"}, doc("h", subjects=["staged"])]})
        assert staged.status_code == 200, staged.text
        seen = post(admin, name, {**body, "batch_ids": [staged.json()["batch_id"]]})
        assert counts(seen, "Subject") == {**counts(before, "Subject"), "staged": 1}
        admin.post(f"/catalogs/{name}/batches/{staged.json()['batch_id']}/abort")
    finally:
        commit(admin, name, [{"op": "unindex", "uid": "g", "version": 2}])
    assert post(admin, name, body) == before | {"counter": post(admin, name, body)["counter"]}


def test_an_empty_query_counts_as_zcatalog_would_with_the_facet_value(admin, faceted):
    """ZCatalog finds nothing for an empty query, but dict({}, portal_type=v) finds every object
    of that type: the facet counts those."""
    name, _ = faceted
    answer = post(admin, name, {"query": {}, "facets": ["portal_type"]})
    assert answer["items_total"] == 0
    assert counts(answer, "portal_type") == {"Document": 2, "News Item": 2, "Event": 2}
