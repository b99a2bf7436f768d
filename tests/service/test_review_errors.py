"""Review: query input that the service answers with 500 instead of a 4xx problem.

Every case is something any anonymous caller can send to /search; each was a 500 found in review
(all fixed: integer parameters out of range, negative pages, NUL characters, an empty sort_order).
The hypothesis test fuzzes the query endpoint for more.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.service.test_api import INDEXES, NOW, entry
from tests.service.test_review_support import commit_batch, drained_service, get, new_catalog, post


@pytest.fixture(scope="module")
def service(database_url):
    with drained_service(database_url) as service:
        yield service


@pytest.fixture(scope="module")
def name(service):
    with service.client() as admin:
        name, _ = new_catalog(admin)
    past = NOW - timedelta(days=1)
    commit_batch(service, name, [entry("a", "/plone/a", effective=past, text="hello world", subjects=["x"]),
                                 entry("b", "/plone/a/b", effective=past, subjects=["y", "z"])])
    return name


BAD_BODIES = [
    pytest.param({"query": {"path": {"query": "/plone", "level": 10**10}}}, id="level"),
    pytest.param({"query": {"path": {"query": "/plone", "depth": 10**10}}}, id="depth"),
    pytest.param({"query": {"path": {"query": "/plone", "depth": 10**10, "navtree": 1}}},
                 id="navtree-depth"),
    pytest.param({"query": {"path": {"query": "/plone", "level": -1, "depth": 10**10}}},
                 id="any-level-depth"),
    pytest.param({"query": {"portal_type": "Document", "b_start": 10**30, "b_size": 1}},
                 id="query-b_start"),
    pytest.param({"query": {"portal_type": "Document"}, "b_start": 10**26},
                 id="body-b_start"),
    pytest.param({"query": {"portal_type": "Document"}, "b_size": -1}, id="body-b_size"),
    pytest.param({"query": {"portal_type": "Document"}, "b_start": -1, "b_size": 1},
                 id="body-b_start-negative"),
    pytest.param({"query": {"id": "\x00"}}, id="nul-field"),
    pytest.param({"query": {"Subject": ["a", "\x00"]}}, id="nul-keyword"),
    pytest.param({"query": {"path": "/pl\x00one"}}, id="nul-path"),
    pytest.param({"query": {"portal_type": "Document"}, "metadata": ["\x00"]},
                 id="nul-metadata"),
    pytest.param({"query": {"portal_type": "Document", "sort_on": ["id"], "sort_order": []}}, id="empty-sort_order"),
    pytest.param({"query": {"portal_type": "Document", "path": ["/a", 5]}}, id="deferred-error-params"),
    # Controls: the same shapes within range are answered.
    pytest.param({"query": {"path": {"query": "/plone", "level": 1, "depth": 2}}}, id="control-path"),
    pytest.param({"query": {"portal_type": "Document"}, "b_start": 3, "b_size": 1}, id="control-page"),
]


@pytest.mark.parametrize("body", BAD_BODIES)
def test_query_input_is_answered_without_500(service, name, body):
    response = post(service, f"/search?catalog={name}", json=body)
    assert response.status_code < 500, response.text


def test_get_search_negative_b_start_is_4xx(service, name):
    response = get(service, "/search", params={"catalog": name, "portal_type": "Document", "b_start": "-1",
                                               "b_size": "1"})
    assert response.status_code < 500, response.text


# -- fuzzing -----------------------------------------------------------------------------------------

NAMES = [d.name for d in INDEXES if d.name != "allowedRolesAndUsers"]
OPTIONS = ["query", "range", "not", "operator", "depth", "level", "navtree", "navtree_start"]
integers = st.one_of(st.integers(-3, 3), st.integers(-(2**70), 2**70))
scalars = st.one_of(
    st.none(), st.booleans(), integers, st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.sampled_from(["min", "max", "min:max", "and", "or", "/plone", "/plone/a", "2020-01-01", "hel*", "NOT",
                     "reverse", "hello world"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(OPTIONS), inner, max_size=3)),
    max_leaves=6,
)
query_keys = st.sampled_from(NAMES + ["sort_on", "sort_order", "sort_limit", "b_start", "b_size", "path_depth"])
bodies = st.fixed_dictionaries(
    {"query": st.dictionaries(query_keys, values, max_size=4)},
    optional={"b_start": integers, "b_size": integers,
              "metadata": st.one_of(st.just("*"), st.lists(st.text(max_size=4), max_size=2))},
)


@settings(deadline=None, suppress_health_check=list(HealthCheck), database=None)
@example({"query": {"portal_type": "Document"}, "b_size": -1})
@example({"query": {"path": {"query": "/plone", "level": 10**10}}})
@given(body=bodies)
def test_fuzzed_queries_are_answered_without_500(service, name, body):
    try:
        response = post(service, f"/search?catalog={name}", json=body)
    except UnicodeEncodeError:
        return  # lone surrogates cannot be sent as UTF-8 JSON by the client at all
    assert response.status_code < 500, (body, response.text)
