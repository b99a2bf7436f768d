"""A scoped key can never widen its filter: generated filters and requests, answered with the key
on a catalog, must equal the answers of the same requests on a second catalog that holds only the
objects the filter selects (chosen here, in Python, from the objects' values), without a key.

That oracle is the brute force of "filter AND request": it covers what a request may try, every
way it may be sent (a JSON body, ``q`` and form parameters of GET ``/search``, plone.restapi's
``@search`` and ``@querystring-search``), other values of the filter's own indexes, paths outside
the filter's, queries naming none of its indexes, the connector's headers
(``X-Catalog-Principals``, ``X-Catalog-Unrestricted``), and facet counts, which must count nothing
outside the filter (docs/decisions/0020).
"""

from __future__ import annotations

import os
import random
import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog_schemas.api import CatalogCreate
from tests.service.test_facets import INDEXES
from tests.service.test_review_support import commit_batch

SETTINGS = {"site_path": "/plone", "public_url": "https://www.example.org"}
TYPES = ["Document", "News Item", "Event", "Folder"]
STATES = ["published", "private", "pending"]
SUBJECTS = ["a", "b", "c", "x y"]
# Look-alikes: a filter on /plone/news must not reach /plone/news_archive or /plone/news%.
SECTIONS = ["/plone/news", "/plone/news_archive", "/plone/news%", "/plone/events", "/plone/a b",
            "/plone/news/sub"]
NOW = datetime.now(UTC)
EXAMPLES = int(os.environ.get("KEY_FILTER_EXAMPLES", "100"))


def corpus(seed: int = 20) -> list[dict]:
    """Objects in every section (and the sections themselves), of every type, state and subject,
    some only for Manager or Member, some not effective yet or expired."""
    rng = random.Random(seed)
    objects = []
    paths = list(SECTIONS) + [f"{s}/{n}" for s in SECTIONS for n in ("one", "two", "thr ee", "4")]
    for number, path in enumerate(paths):
        allowed = rng.choice([["Anonymous"]] * 4 + [["Manager"], ["Member", "Manager"]])
        effective = NOW - timedelta(days=1) if rng.random() < 0.85 else NOW + timedelta(days=3)
        expires = NOW - timedelta(hours=1) if rng.random() < 0.08 else None
        objects.append({
            "uid": f"o{number}", "path": path, "portal_type": rng.choice(TYPES), "review_state": rng.choice(STATES),
            # "zz" only in one section: a `not` alone of it finds other objects where some object
            # holds it (UnIndex), so a filter leaving that section out must hide it there too.
            "Subject": rng.sample(SUBJECTS, rng.randint(0, 3)) + (["zz"] if path.startswith("/plone/a b") else []),
            "allowed": allowed,
            "effective": effective, "expires": expires,
        })
    return objects


def entry(obj: dict) -> dict:
    return {"op": "index", "uid": obj["uid"], "path": obj["path"], "version": 1,
            "values": {"allowedRolesAndUsers": obj["allowed"], "portal_type": obj["portal_type"],
                       "review_state": obj["review_state"], "Subject": obj["Subject"], "id": obj["uid"],
                       "effectiveRange": [obj["effective"].isoformat(),
                                          obj["expires"] and obj["expires"].isoformat()]},
            "metadata": {"Title": f"Title of {obj['uid']}", "portal_type": obj["portal_type"],
                         "review_state": obj["review_state"]}}


OBJECTS = corpus()


def new_catalog(admin, objects: list[dict]) -> str:
    name = "kf-" + uuid.uuid4().hex[:10]
    spec = CatalogCreate(id=name, indexes=INDEXES, metadata=["Title", "portal_type", "review_state"],
                         settings=SETTINGS)
    response = admin.post("/catalogs", json=spec.model_dump())
    assert response.status_code == 201, response.text
    return name


@pytest.fixture(scope="module")
def full_catalog(live_service):
    with live_service.client() as admin:
        name = new_catalog(admin, OBJECTS)
        commit_batch(live_service, name, [entry(o) for o in OBJECTS])
        yield name
        admin.delete(f"/catalogs/{name}")


# -- the filter, and its brute force -----------------------------------------------------------


def under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def admits(scope: dict, obj: dict) -> bool:
    """Whether ``obj`` is one of the objects ``scope`` selects, as ZCatalog's indexes read these
    forms of query."""
    for name, condition in scope.items():
        if name == "path":
            roots = condition["query"] if isinstance(condition, dict) else condition
            if not under(obj["path"], [roots] if isinstance(roots, str) else roots):
                return False
        elif name == "Subject":
            wanted = set(condition["query"])
            have = set(obj["Subject"])
            if not (wanted <= have if condition["operator"] == "and" else wanted & have):
                return False
        elif obj[name] not in condition:
            return False
    return True


filters = st.fixed_dictionaries({}, optional={
    "portal_type": st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True),
    "review_state": st.lists(st.sampled_from(STATES), min_size=1, max_size=2, unique=True),
    "Subject": st.fixed_dictionaries({"query": st.lists(st.sampled_from(SUBJECTS), min_size=1, max_size=2,
                                                        unique=True),
                                      "operator": st.sampled_from(["or", "and"])}),
    "path": st.one_of(st.sampled_from(SECTIONS),
                      st.fixed_dictionaries({"query": st.lists(st.sampled_from(SECTIONS), min_size=1, max_size=2,
                                                               unique=True)})),
})

# -- the requests that try to widen it ---------------------------------------------------------

values_of = {"portal_type": TYPES + ["Image"], "review_state": STATES, "Subject": SUBJECTS + ["zz"]}


def condition_of(index: str):
    values = st.sampled_from(values_of[index])
    lists = st.lists(values, min_size=1, max_size=3, unique=True)
    forms = [values, lists, st.fixed_dictionaries({"not": lists}),
             st.fixed_dictionaries({"query": lists, "not": lists})]
    if index == "Subject":
        forms.append(st.fixed_dictionaries({"query": lists, "operator": st.sampled_from(["or", "and"])}))
    return st.one_of(forms)


paths = st.sampled_from(SECTIONS + ["/plone", "/plone/elsewhere", "/news", "/plone/news/one"])
path_conditions = st.one_of(
    paths, st.lists(paths, min_size=1, max_size=3, unique=True),
    st.fixed_dictionaries({"query": paths, "depth": st.sampled_from([0, 1, 2, -1])}),
    st.fixed_dictionaries({"query": paths, "navtree": st.just(True)}),
)
queries = st.fixed_dictionaries({}, optional={
    "portal_type": condition_of("portal_type"),
    "review_state": condition_of("review_state"),
    "Subject": condition_of("Subject"),
    "path": path_conditions,
    "sort_on": st.sampled_from(["id", "portal_type"]),
    "sort_order": st.sampled_from(["ascending", "descending"]),
})
requests = st.fixed_dictionaries({
    "query": queries,
    "b_start": st.sampled_from([0, 0, 3, 20]),
    "b_size": st.sampled_from([5, 25, 100]),
    "facets": st.lists(st.sampled_from(["portal_type", "review_state", "Subject"]), max_size=3, unique=True),
    "route": st.sampled_from(["post", "get-q", "get-form", "querystring-search", "restapi-search"]),
    "headers": st.sampled_from([{}, {"X-Catalog-Unrestricted": "1"},
                                {"X-Catalog-Principals": '["Manager", "Member", "Anonymous"]'},
                                {"X-Catalog-Unrestricted": "yes", "X-Catalog-Principals": '["Manager"]'}]),
})


def _get_form(query: dict) -> list[tuple[str, str]]:
    """The query as Zope form parameters where a form can say it, the rest as JSON in ``q``."""
    pairs, rest = [], {}
    for name, value in query.items():
        if isinstance(value, str):
            pairs.append((name, value))
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            pairs += [(f"{name}:list", v) for v in value]
        else:
            rest[name] = value
    if rest:
        pairs.append(("q", orjson.dumps(rest).decode()))
    return pairs


def _criteria(query: dict) -> list[dict]:
    """plone.app.querystring criteria for what of ``query`` they can say."""
    criteria = []
    for name in ("portal_type", "review_state", "Subject"):
        value = query.get(name)
        if isinstance(value, str | list):
            criteria.append({"i": name, "o": "plone.app.querystring.operation.selection.any",
                             "v": value if isinstance(value, list) else [value]})
    path = query.get("path")
    if isinstance(path, str):
        criteria.append({"i": "path", "o": "plone.app.querystring.operation.string.absolutePath",
                         "v": path.removeprefix("/plone") or "/"})
    return criteria or [{"i": "portal_type", "o": "plone.app.querystring.operation.selection.none", "v": ["Image"]}]


def send(client: httpx.Client, catalog: str, request: dict, credential: str | None) -> tuple[int, dict]:
    headers = dict(request["headers"])
    if credential:
        headers["Authorization"] = f"Bearer {credential}"
    query, route = request["query"], request["route"]
    paging = {"b_start": request["b_start"], "b_size": request["b_size"]}
    if route == "post":
        response = client.post("/search", params={"catalog": catalog}, headers=headers,
                               json={"query": query, "facets": request["facets"], **paging})
    elif route in ("get-q", "get-form"):
        pairs = [("q", orjson.dumps(query).decode())] if route == "get-q" else _get_form(query)
        pairs += [("catalog", catalog), *((k, str(v)) for k, v in paging.items())]
        pairs += [("facets", f) for f in request["facets"]]
        response = client.get("/search?" + urlencode(pairs), headers=headers)
    elif route == "querystring-search":
        body = {"query": _criteria(query), **paging}
        if "sort_on" in query:
            body.update(sort_on=query["sort_on"], sort_order=query.get("sort_order", "ascending"))
        response = client.post(f"/{catalog}/@querystring-search", headers=headers, json=body)
    else:
        response = client.get(f"/{catalog}/@search?" + urlencode(_get_form(
            {k: v for k, v in query.items() if not isinstance(v, dict)}) + list(paging.items())), headers=headers)
    body = response.json()
    if isinstance(body, dict):
        # plone.restapi's answers name the request's own URL (the catalog's name): not the answer.
        body.pop("@id", None)
        body.pop("batching", None)
        body.pop("instance", None)
    return response.status_code, body


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(scope=filters, principals=st.sampled_from([["Anonymous"], ["Anonymous", "Member"]]),
       tries=st.lists(requests, min_size=1, max_size=5))
def test_a_key_sees_exactly_its_filter(live_service, full_catalog, scope, principals, tries):
    selected = [o for o in OBJECTS if admits(scope, o)]
    with live_service.client() as admin:
        made = admin.post(f"/catalogs/{full_catalog}/keys",
                          json={"name": "generated", "filter": scope, "principals": principals})
        assert made.status_code == 201, made.text
        key = made.json()["key"]
        oracle = new_catalog(admin, selected)
        try:
            if selected:
                commit_batch(live_service, oracle, [entry(o) for o in selected])
            token = None
            if principals != ["Anonymous"]:
                token = admin.post(f"/catalogs/{oracle}/tokens", json={"principals": principals}).json()["token"]
            with httpx.Client(base_url=live_service.url, timeout=60) as client:
                for request in tries:
                    with_key = send(client, full_catalog, request, key)
                    expected = send(client, oracle, request, token)
                    assert with_key == expected, (scope, request)
        finally:
            admin.delete(f"/catalogs/{oracle}")
            admin.delete(f"/catalogs/{full_catalog}/keys/{made.json()['id']}")


def test_the_oracle_is_not_trivial(live_service, full_catalog):
    """The comparison above can fail: a key's answers differ from the whole catalog's, and the
    filters select something and leave something out."""
    scope = {"path": "/plone/news", "portal_type": ["Document", "News Item"]}
    selected = [o for o in OBJECTS if admits(scope, o)]
    assert 0 < len(selected) < len(OBJECTS)
    assert not any(admits(scope, o) for o in OBJECTS if o["path"].startswith("/plone/news_archive"))
    with live_service.client() as admin:
        key = admin.post(f"/catalogs/{full_catalog}/keys", json={"name": "fixed", "filter": scope}).json()["key"]
    request = {"query": {}, "b_start": 0, "b_size": 100, "facets": ["portal_type"], "route": "post", "headers": {}}
    with httpx.Client(base_url=live_service.url, timeout=60) as client:
        status, scoped = send(client, full_catalog, request, key)
        _, whole = send(client, full_catalog, request, None)
    assert status == 200 and 0 < scoped["items_total"] < whole["items_total"]
    assert {v["value"] for v in scoped["facets"]["portal_type"]["values"]} <= {"Document", "News Item"}
    assert all(i["path"].startswith("/news/") or i["path"] == "/news" for i in scoped["items"])
