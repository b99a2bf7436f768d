"""Hand-written edge cases, one or more per ZCatalog corner listed in
docs/decisions/0003-query-semantics.md.

Same comparison as the generated tests (``compare``), on one fixed corpus built to contain the
traps: ids with ``_``, ``%``, spaces and non-ASCII letters next to look-alikes (``a_b``/``axb``,
``news``/``news_archive``/``news%``), equal sort keys, missing attributes, ``None`` values, dates
in several time zones within one minute of each other, recurring events with EXDATE and UNTIL,
accented and CJK text.
"""

from __future__ import annotations

import uuid

import pytest
from DateTime import DateTime

from tests.service.oracle import (  # noqa: F401
    CatalogObject,
    ServiceCatalog,
    ZCatalogOracle,
    compare,
    service_client_fixture,
)
from tests.service.strategies import INDEXES, METADATA, query_to_wire, to_wire

T = DateTime


def _obj(path, position, **attrs):
    uid = "u" + uuid.uuid5(uuid.NAMESPACE_URL, path).hex[:31]
    oid = path.rsplit("/", 1)[1]
    attrs = {"UID": uid, "getId": oid, "getObjPositionInParent": position, **attrs}
    attrs.setdefault("is_folderish", False)
    return CatalogObject(uid=uid, path=path, attrs=attrs)


STAMP = T("2021-06-01T12:00:30+02:00")
CORPUS = [
    _obj(
        "/plone/news", 0, portal_type="Folder", review_state="published", is_folderish=True,
        Subject=["Plone", "News"], created=T("2020-01-01T10:00:00+00:00"), modified=STAMP,
        effective=T("2020-01-01T00:00:00+00:00"), expires=None, Title="News",
        sortable_title="news", SearchableText="News folder café",
    ),
    _obj(
        "/plone/news/first item", 0, portal_type="News Item", review_state="published",
        Subject=["Plone"], created=T("2020-01-01T11:00:00+01:00"), modified=T("2021-06-01T10:00:00+00:00"),
        effective=T("2030-01-01T00:00:00+00:00"), Title="First Été", sortable_title="first ete",
        SearchableText="Crème brûlée plone newsletter", exclude_from_nav=True,
    ),
    _obj(
        "/plone/news/100%", 1, portal_type="Document", review_state="private",
        Subject=["100%", "x_y"], created=T("2019-05-05T05:05:00-05:00"), modified=T("2022-01-01T00:00:00+00:00"),
        expires=T("2020-06-01T00:00:00+00:00"), Title="100%", sortable_title="100%",
        SearchableText="percent 100% x_y",
    ),
    _obj(
        "/plone/news/a_b", 2, portal_type="Document", review_state="pending", Subject=[],
        modified=STAMP, created=T("2019-05-05T05:05:00-05:00"), Title="a_b", sortable_title="a_b",
        SearchableText="underscore a_b",
    ),
    _obj(
        "/plone/news/axb", 3, portal_type="Document", review_state="published",
        Subject=["Ünïcode"], modified=T("2020-02-02T02:02:00+00:00"), Title="axb",
        sortable_title="axb", SearchableText="look alike axb plone",
        effective=T("2019-12-31T23:59:00-01:00"), expires=T("2030-01-01T00:00:00+00:00"),
    ),
    _obj(
        "/plone/Über uns", 1, portal_type="Folder", review_state="published", is_folderish=True,
        Subject=["Ünïcode", "plone"], modified=T("2023-03-03T03:03:00+00:00"), Title="Über uns",
        sortable_title="uber uns", SearchableText="Über uns ueber PLONE",
    ),
    _obj(
        "/plone/Über uns/日本", 0, portal_type=None, review_state="published", is_folderish=True,
        Subject=["日本"], modified=T("2023-03-03T03:03:00+00:00"), Title="日本",
        sortable_title="日本", SearchableText="日本語テキスト 東京",
    ),
    _obj("/plone/Über uns/日本/deep.doc", 0, portal_type="Document", Title="deep", sortable_title="deep"),
    _obj("/plone/events", 2, portal_type="Folder", review_state="published", is_folderish=True,
         sortable_title="events", modified=T("2024-01-01T00:00:00+00:00")),
    _obj(
        "/plone/events/weekly", 0, portal_type="Event", review_state="published",
        sortable_title="weekly", start=T("2024-03-04T09:00:00+00:00"),
        start_recurrence="RRULE:FREQ=WEEKLY;COUNT=4\nEXDATE:20240311T090000Z",
    ),
    _obj(
        "/plone/events/daily until", 1, portal_type="Event", review_state="published",
        sortable_title="daily", start=T("2024-03-01T18:00:00+02:00"),
        start_recurrence="RRULE:FREQ=DAILY;UNTIL=20240305T000000Z",
    ),
    _obj(
        "/plone/events/single", 2, portal_type="Event", review_state="private",
        sortable_title="single", start=T("2024-03-10T23:30:00-05:00"),
    ),
    _obj(
        "/plone/events/capped", 3, portal_type="Event", review_state="private",
        sortable_title="capped", start=T("2024-03-01T08:00:00+00:00"),
        start_recurrence="RRULE:FREQ=DAILY;COUNT=30", start_recurrence_until=T("2024-03-03T08:00:00+00:00"),
    ),
    _obj("/plone/news_archive", 3, portal_type="Folder", is_folderish=True, sortable_title="news"),
    _obj("/plone/news%", 4, portal_type="Folder", is_folderish=True, sortable_title="news"),
    _obj("/plone/news%/x", 0, portal_type="Document", sortable_title="x"),
]  # fmt: skip
UID = {obj.path: obj.uid for obj in CORPUS}

EDGE_QUERIES = {
    # `not` on every index type (BooleanIndex, DateRangeIndex, path and text have no `not`:
    # ZCatalog raises, so the service must answer 4xx).
    "not-field": {"portal_type": {"not": "Document"}},
    "not-field-with-query": {"portal_type": {"query": ["Document", "Folder"], "not": "Folder"}},
    "not-keyword": {"Subject": {"not": "Plone"}},
    "not-keyword-list": {"Subject": {"not": ["Plone", "100%"]}},
    "not-keyword-with-query": {"Subject": {"query": ["Plone", "Ünïcode"], "not": "News"}},
    "not-uuid": {"UID": {"not": UID["/plone/news"]}},
    "not-date": {"modified": {"not": STAMP}},
    "not-gopip": {"getObjPositionInParent": {"not": 0}},
    "not-recurring": {"start": {"not": T("2024-03-04T09:00:00+00:00")}},
    "not-boolean": {"is_folderish": {"query": True, "not": False}},
    "not-daterange": {"effectiveRange": {"query": T("2025-01-01"), "not": T("2025-01-01")}},
    "not-path": {"path": {"query": "/plone", "not": "/plone/news"}},
    "not-text": {"SearchableText": {"query": "plone", "not": "news"}},
    # range min / max / minmax, and inverted bounds (UnIndex takes min(keys) and max(keys), so
    # they select the same range as ordered ones).
    "range-date-min": {"modified": {"query": STAMP, "range": "min"}},
    "range-date-max": {"modified": {"query": STAMP, "range": "max"}},
    "range-date-minmax": {"modified": {"query": [T("2021-01-01"), T("2023-01-01")], "range": "min:max"}},
    "range-date-inverted": {"modified": {"query": [T("2023-01-01"), T("2021-01-01")], "range": "min:max"}},
    "range-gopip-minmax": {"getObjPositionInParent": {"query": [1, 2], "range": "min:max"}},
    "range-gopip-inverted": {"getObjPositionInParent": {"query": [2, 1], "range": "min:max"}},
    "range-field-text-min": {"sortable_title": {"query": "news", "range": "min"}},
    "range-keyword": {"Subject": {"query": ["P", "x"], "range": "min:max"}},
    "range-uuid": {"UID": {"query": "u8", "range": "min"}},
    "range-recurring": {"start": {"query": [T("2024-03-05"), T("2024-03-12")], "range": "min:max"}},
    "range-one-bound-list": {"modified": {"query": [STAMP], "range": "min:max"}},
    # None and empty values.
    "none-alone": {"portal_type": None},
    "none-with-other": {"portal_type": None, "review_state": "published"},
    "empty-string": {"portal_type": ""},
    "empty-list": {"portal_type": []},
    "empty-list-with-other": {"Subject": [], "review_state": "published"},
    "empty-query-record": {"portal_type": {"query": []}},
    "empty-text": {"SearchableText": ""},
    "none-uuid": {"UID": None, "portal_type": "Document"},
    "empty-query": {},
    "sort-only": {"sort_on": "modified"},
    # operator and/or.
    "keyword-and": {"Subject": {"query": ["Plone", "Ünïcode"], "operator": "and"}},
    "keyword-or": {"Subject": {"query": ["Plone", "Ünïcode"], "operator": "or"}},
    "keyword-bad-operator": {"Subject": {"query": ["Plone"], "operator": "xor"}},
    "path-and": {"path": {"query": ["/plone/news", "/plone/news/a_b"], "operator": "and"}},
    "field-operator": {"portal_type": {"query": ["Document"], "operator": "and"}},
    # Multiple sort_on with per-key sort_order.
    "sort-ties": {"path": "/plone", "sort_on": "modified"},
    "sort-two-keys": {
        "path": "/plone",
        "sort_on": ["review_state", "modified"],
        "sort_order": ["ascending", "descending"],
    },
    "sort-three-keys": {
        "path": "/plone",
        "sort_on": ["portal_type", "sortable_title", "getObjPositionInParent"],
        "sort_order": ["descending", "ascending", "descending"],
    },
    "sort-reverse": {"path": "/plone", "sort_on": "sortable_title", "sort_order": "reverse"},
    "sort-missing-key": {"path": "/plone", "sort_on": "modified", "sort_order": "descending"},
    "sort-unknown": {"path": "/plone", "sort_on": "nonexistent"},
    "sort-text-index": {"path": "/plone", "sort_on": "SearchableText"},
    "sort-keyword-index": {"path": "/plone/news", "sort_on": "Subject"},
    # Regression: an invalid query of a later index raises only if the earlier ones found something.
    "text-error-after-empty-index": {"SearchableText": "zzzznomatch", "Title": "über OR or"},
    "text-error-after-matching-index": {"SearchableText": "plone", "Title": "über OR or"},
    # Regression: navtree deeper than 1 outside the site (ExtendedPathIndex drops no component).
    "navtree-deep-outside-site": {"path": {"query": ["/nope"], "navtree": True, "depth": 2}},
    # Regression: next to keys, UnIndex looks `not` values up unconverted (dates exclude nothing).
    "date-keys-and-not": {"modified": {"query": [STAMP], "not": STAMP}},
    # Regression: a sorted page near the end, with results lacking the sort key.
    "sorted-page-near-end-missing-keys": {"path": "/plone", "sort_on": "sortable_title", "b_size": 1, "b_start": 14},
    # sort_limit.
    "sort-limit": {"path": "/plone", "sort_on": "sortable_title", "sort_limit": 3},
    "sort-limit-reverse": {
        "path": "/plone",
        "sort_on": "sortable_title",
        "sort_order": "descending",
        "sort_limit": 4,
    },
    "sort-limit-unsorted": {"path": "/plone", "sort_limit": 2},
    "sort-limit-with-batch": {
        "path": "/plone",
        "sort_on": "sortable_title",
        "sort_limit": 3,
        "b_start": 2,
        "b_size": 5,
    },
    # Regression: sort_limit with b_start and no b_size caps the sorted result at sort_limit,
    # then starts at b_start (Catalog._sort_limit_arguments + sortResults)...
    "sort-limit-start-no-size": {"path": "/plone", "sort_on": "sortable_title", "sort_limit": 5, "b_start": 3},
    "sort-limit-start-past-limit": {"path": "/plone", "sort_on": "sortable_title", "sort_limit": 2, "b_start": 3},
    # ...except from the second half, where the reversed sort takes sort_limit items from b_start.
    "sort-limit-start-second-half": {"path": "/plone", "sort_on": "sortable_title", "sort_limit": 3, "b_start": 12},
    # Unsorted, sort_limit is the page size from b_start.
    "sort-limit-start-unsorted": {"path": "/plone", "sort_limit": 3, "b_start": 2},
    # b_start / b_size, including past the end.
    "batch-first": {"path": "/plone", "sort_on": "sortable_title", "b_start": 0, "b_size": 5},
    "batch-near-end": {"path": "/plone", "sort_on": "sortable_title", "b_start": 12, "b_size": 5},
    "batch-past-end": {"path": "/plone", "sort_on": "sortable_title", "b_start": 100, "b_size": 10},
    "batch-unsorted-past-end": {"path": "/plone", "b_start": 100, "b_size": 10},
    "batch-size-zero": {"path": "/plone", "sort_on": "sortable_title", "b_start": 0, "b_size": 0},
    "batch-start-alone": {"path": "/plone", "sort_on": "sortable_title", "b_start": 3},
    # ExtendedPathIndex: depth, navtree, navtree_start, lists of paths; ids are data.
    "path-subtree": {"path": "/plone/news"},
    "path-depth-0": {"path": {"query": "/plone/news", "depth": 0}},
    "path-depth-1": {"path": {"query": "/plone/news", "depth": 1}},
    "path-depth-2": {"path": {"query": "/plone", "depth": 2}},
    "path-depth-minus-1": {"path": {"query": "/plone/news", "depth": -1}},
    "folder-listing": {"path": {"query": "/plone", "depth": 1}, "sort_on": "getObjPositionInParent"},
    "navtree": {"path": {"query": "/plone/Über uns/日本/deep.doc", "navtree": True, "depth": 1}},
    "navtree-start": {
        "path": {"query": "/plone/Über uns/日本/deep.doc", "navtree": True, "navtree_start": 1}
    },
    "navtree-start-depth": {
        "path": {"query": "/plone/Über uns/日本", "navtree": True, "navtree_start": 2, "depth": 2}
    },
    "path-list": {"path": ["/plone/events", "/plone/Über uns"]},
    "path-list-depth": {"path": {"query": ["/plone/events", "/plone/news%"], "depth": 1}},
    "path-underscore": {"path": "/plone/news/a_b"},
    "path-prefix-lookalike": {"path": {"query": "/plone/news", "depth": -1}, "portal_type": "Folder"},
    "path-percent": {"path": "/plone/news%"},
    "path-space-non-ascii": {"path": {"query": "/plone/Über uns", "depth": 1}},
    "path-missing": {"path": "/plone/nope"},
    "path-trailing-slash": {"path": "/plone/news/"},
    "path-level": {"path": {"query": "news", "level": 1}},
    "getid-percent": {"getId": "100%"},
    "getid-underscore": {"getId": "a_b"},
    # DateRangeIndex effectiveRange: open ends, boundaries at minute resolution.
    "effective-now-ish": {"effectiveRange": T("2025-01-01T00:00:00+00:00")},
    "effective-boundary": {"effectiveRange": T("2020-01-01T00:00:00+00:00")},
    "effective-boundary-other-zone": {"effectiveRange": T("2020-01-01T00:00:59+00:00")},
    "effective-far-past": {"effectiveRange": T("1990-01-01T00:00:00+00:00")},
    # DateRecurringIndex: occurrences, EXDATE, UNTIL, until attribute.
    "recurring-occurrence": {"start": T("2024-03-18T09:00:00+00:00")},
    "recurring-exdate": {"start": T("2024-03-11T09:00:00+00:00")},
    "recurring-until": {"start": {"query": T("2024-03-04T00:00:00+00:00"), "range": "min"}},
    "recurring-until-attribute": {"start": {"query": T("2024-03-03T12:00:00+00:00"), "range": "min"}},
    "recurring-zone": {"start": T("2024-03-11T04:30:00+00:00")},
    # ZCTextIndex syntax and Plone's splitting and folding.
    "text-word": {"SearchableText": "plone"},
    "text-case": {"SearchableText": "PLONE"},
    "text-accent": {"SearchableText": "cafe"},
    "text-and": {"SearchableText": "creme AND brulee"},
    "text-implicit-and": {"SearchableText": "plone newsletter"},
    "text-or": {"SearchableText": "plone OR ueber"},
    "text-not": {"SearchableText": "plone AND NOT newsletter"},
    "text-phrase": {"SearchableText": '"crème brûlée"'},
    "text-phrase-wrong-order": {"SearchableText": '"brûlée crème"'},
    "text-glob": {"SearchableText": "news*"},
    "text-glob-accent": {"SearchableText": "Üb*"},
    "text-cjk": {"SearchableText": "日本"},
    "text-cjk-word": {"SearchableText": "東京"},
    "text-operator-word": {"SearchableText": "and"},
    "text-leading-not": {"SearchableText": "NOT plone"},
    "text-punctuation": {"SearchableText": "x_y"},
    "text-percent": {"SearchableText": "100%"},
    "text-title-accent": {"Title": "ete"},
    "text-sorted": {"SearchableText": "plone", "sort_on": "sortable_title"},
    "text-two-indexes": {"SearchableText": "plone", "Title": "uber"},
    # DateIndex resolution and time zones.
    "date-same-minute": {"modified": T("2021-06-01T10:00:00+00:00")},
    "date-other-zone": {"created": T("2020-01-01T10:00:00+00:00")},
    "date-range-zone": {"created": {"query": T("2020-01-01T11:00:00+01:00"), "range": "max"}},
    # Booleans, UUIDs.
    "boolean-true": {"is_folderish": True},
    "boolean-false": {"exclude_from_nav": False},
    "boolean-list": {"is_folderish": [True, False]},
    "uuid-list": {"UID": [UID["/plone/news"], UID["/plone/events"]]},
    # Unknown index names: ZCatalog ignores them; a 4xx is accepted too.
    "unknown-index": {"nonexistent": "x", "portal_type": "Document"},
}


@pytest.fixture(scope="module")
def corpus(service_client):
    """The corpus in a ZCatalog and in one service catalog."""
    oracle = ZCatalogOracle(INDEXES, METADATA)
    for obj in CORPUS:
        oracle.index(obj)
    catalog = ServiceCatalog(service_client, f"edges-{uuid.uuid4().hex[:12]}", INDEXES, METADATA)
    catalog.load([to_wire(obj) for obj in CORPUS])
    yield oracle, catalog
    catalog.drop()


@pytest.mark.parametrize("query", EDGE_QUERIES.values(), ids=EDGE_QUERIES.keys())
def test_edge_case(corpus, query):
    oracle, catalog = corpus
    status, body = catalog.query(query_to_wire(query))
    problem = compare(oracle, query, status, body, {obj.uid: obj.path for obj in CORPUS})
    assert problem is None, problem


# ZCatalog's score: the text indexes' scores, plus one per other index whose set it intersects.
SCORED_QUERIES = {
    "text-alone": {"SearchableText": "plone"},
    "text-and-path": {"SearchableText": "plone", "path": "/plone"},
    "text-three-sets": {"SearchableText": "plone OR ueber", "path": "/plone",
                        "portal_type": ["Document", "Folder", "News Item"],
                        "effectiveRange": T("2031-01-01T00:00:00+00:00")},
    "two-texts-and-a-set": {"SearchableText": "plone", "Title": "uber OR first", "path": "/plone"},
    "text-page": {"SearchableText": "plone OR news", "path": "/plone", "b_start": 1, "b_size": 2},
    "text-range-between-sets": {"SearchableText": "plone", "Subject": "Plone", "effectiveRange": T("2031-01-01T00:00:00+00:00"),
                                "path": "/plone"},
    "text-not-only-nothing-held": {"SearchableText": "plone", "portal_type": {"not": "Nope"}},
}


@pytest.mark.parametrize("query", SCORED_QUERIES.values(), ids=SCORED_QUERIES.keys())
def test_scores_are_zcatalogs(corpus, query):
    oracle, catalog = corpus
    want = oracle.run(query)
    assert want.scores, "the query must score something"
    status, body = catalog.query(query_to_wire(query))
    assert status == 200, body
    got = {item["uid"]: item["score"] for item in body["items"]}
    assert got == dict(zip(want.uids, want.scores, strict=True))
