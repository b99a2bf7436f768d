"""Bad input never gives a 500: every reproduction of issue 24 is answered 4xx with problem
details; destructive flags take booleans only; numbers JSON cannot hold (NaN, Infinity, 1e400)
and NUL characters (PostgreSQL's text holds none) are refused, never stored changed; a 405 lists
the methods of every route of its path.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.service.test_api import UNRESTRICTED, entry
from tests.service.test_review_support import commit_batch, drained_service, get, new_catalog, post


@pytest.fixture(scope="module")
def service(database_url):
    with drained_service(database_url) as service:
        yield service


@pytest.fixture(scope="module")
def name(service):
    with service.client() as admin:
        name, _ = new_catalog(admin)
    commit_batch(service, name, [entry("a", "/plone/a", text="hello world")])
    return name


def assert_problem(response, *statuses):
    assert response.status_code in (statuses or range(400, 500)), (response.status_code, response.text)
    assert response.headers["content-type"] == "application/problem+json", response.text
    body = response.json()
    assert body["status"] == response.status_code
    assert "Traceback" not in response.text


def raw(service, method: str, path: str, body: str | None = None, token=None, **kw):
    """A request with a body sent as written (Python's json would not write 1e400)."""
    import httpx

    headers = {"Content-Type": "application/json", **kw.pop("headers", {})}
    if token is not False:
        headers["Authorization"] = f"Bearer {token or service.admin_token}"
    return httpx.request(method, service.url + path, content=body, headers=headers, timeout=30, **kw)


# -- numbers JSON cannot hold -----------------------------------------------------------------

INFINITE = ["1e400", "-1e400", "NaN", "Infinity", "-Infinity"]


@pytest.mark.parametrize("number", INFINITE)
@pytest.mark.parametrize("option", ["sort_limit", "b_start", "b_size"])
@pytest.mark.parametrize("where", ["search", "query"])
def test_infinite_numbers_in_query_options_are_4xx(service, name, number, option, where):
    path = f"/search?catalog={name}" if where == "search" else f"/catalogs/{name}/query"
    body = f'{{"query":{{"{option}":{number}}}}}'
    assert_problem(raw(service, "POST", path, body, token=False if where == "search" else None))


@pytest.mark.parametrize("number", INFINITE)
def test_infinite_numbers_in_page_fields_are_422(service, name, number):
    assert_problem(raw(service, "POST", f"/search?catalog={name}", f'{{"b_size":{number}}}', token=False), 422)


@pytest.mark.parametrize("number", INFINITE)
@pytest.mark.parametrize("part", ["values", "metadata"])
def test_infinite_numbers_in_index_values_and_metadata_are_refused_not_stored_as_null(
        service, name, number, part):
    uid = "inf-" + uuid.uuid4().hex[:8]
    values = f'{{"portal_type":"Document","getObjPositionInParent":{number}}}' if part == "values" else "{}"
    metadata = f'{{"Title":{number}}}' if part == "metadata" else "{}"
    body = (f'{{"batch_id":"{uuid.uuid4().hex}","entries":[{{"op":"index","uid":"{uid}","path":"/plone/{uid}",'
            f'"values":{values},"metadata":{metadata}}}]}}')
    assert_problem(raw(service, "POST", f"/catalogs/{name}/batches", body), 422)
    assert get(service, f"/catalogs/{name}/objects/{uid}", token=None).status_code == 404


# -- NUL characters -----------------------------------------------------------------------------

def test_nul_in_catalog_names_is_4xx(service, name):
    assert_problem(get(service, "/search", params={"catalog": "\x00"}))
    assert_problem(post(service, "/search?catalog=%00", json={"query": {}}))
    assert_problem(get(service, "/catalogs/demo%00", token=None))
    assert_problem(get(service, f"/catalogs/{name}%00", token=None))
    assert_problem(post(service, "/catalogs/demo%00/query", token=None, json={"query": {}}))
    assert_problem(post(service, f"/catalogs/{name}%00/batches", token=None, json={"batch_id": "x"}))


def test_nul_in_after_batch_and_batch_ids_is_4xx(service, name):
    assert_problem(post(service, f"/search?catalog={name}", json={"query": {}, "after_batch": "a\x00"}))
    assert_problem(post(service, f"/catalogs/{name}/query", token=None, headers=UNRESTRICTED,
                        json={"query": {}, "batch_ids": ["a\x00"]}))
    for action in ("commit", "abort"):
        assert_problem(post(service, f"/catalogs/{name}/batches/a%00b/{action}", token=None))
    assert_problem(post(service, f"/catalogs/{name}/batches/a%00b/append", token=None, json={"entries": []}))
    assert_problem(post(service, f"/catalogs/{name}/batches", token=None, json={"batch_id": "a\x00"}))


def test_nul_in_uids_paths_and_values_is_4xx(service, name):
    assert_problem(get(service, f"/catalogs/{name}/objects/a%00b", token=None))
    for bad in (entry("a\x00", "/plone/x"), entry("x", "/plone/\x00"), {**entry("x", "/plone/x"), "idxs": ["\x00"]}):
        assert_problem(post(service, f"/catalogs/{name}/batches", token=None,
                            json={"batch_id": uuid.uuid4().hex, "entries": [bad]}))
    assert_problem(post(service, f"/catalogs/{name}/batches", token=None,
                        json={"batch_id": uuid.uuid4().hex, "entries": [{"op": "unindex", "uid": "\x00"}]}))


@pytest.mark.parametrize("update", [
    {"metadata": ["a\x00"]},
    {"remove_metadata": ["a\x00"]},
    {"remove_indexes": ["a\x00"]},
    {"indexes": [{"name": "x", "type": "FieldIndex", "indexed_attrs": ["a\x00"]}]},
    {"indexes": [{"name": "t", "type": "ZCTextIndex", "lexicon_id": "l\x00"}]},
    {"indexes": [{"name": "r", "type": "DateRangeIndex", "since_field": "s\x00", "until_field": "u"}]},
    {"indexes": [{"name": "r", "type": "DateRangeIndex", "since_field": "s", "until_field": "u\x00"}]},
])
def test_nul_in_schema_strings_is_422(service, name, update):
    assert_problem(raw(service, "PATCH", f"/catalogs/{name}/schema", _json(update)), 422)


@pytest.mark.parametrize("field", [
    {"title": "t\x00"},
    {"metadata": ["m\x00"]},
    {"indexes": [{"name": "x", "type": "FieldIndex", "indexed_attrs": ["a\x00"]}]},
])
def test_nul_in_catalog_creation_is_422(service, field):
    spec = {"id": "n-" + uuid.uuid4().hex[:8], "indexes": [], **field}
    assert_problem(raw(service, "POST", "/catalogs", _json(spec)), 422)


def _json(value) -> str:
    import json

    return json.dumps(value)


# -- versions past PostgreSQL's bigint ------------------------------------------------------------

@pytest.mark.parametrize("version", [2**63, 2**63 + 1, 2**64 - 1, -(2**63) - 1, 2**64, 10**30])
def test_versions_past_bigint_are_422(service, name, version):
    index = {**entry("v", "/plone/v"), "version": version}
    unindex = {"op": "unindex", "uid": "v", "version": version}
    for entries in ([index], [unindex]):
        assert_problem(post(service, f"/catalogs/{name}/batches", token=None,
                            json={"batch_id": uuid.uuid4().hex, "entries": entries}), 422)
    assert_problem(post(service, f"/catalogs/{name}/batches", token=None,
                        json={"batch_id": uuid.uuid4().hex, "entries": [], "version": version}), 422)
    staged = uuid.uuid4().hex
    assert post(service, f"/catalogs/{name}/batches?stage=true", token=None,
                json={"batch_id": staged, "entries": []}).status_code == 200
    assert_problem(post(service, f"/catalogs/{name}/batches/{staged}/append", token=None,
                        json={"entries": [index]}), 422)
    post(service, f"/catalogs/{name}/batches/{staged}/abort", token=None)


def test_the_largest_bigint_version_is_taken(service, name):
    uid = "big-" + uuid.uuid4().hex[:8]
    commit_batch(service, name, [{**entry(uid, f"/plone/{uid}"), "version": 2**63 - 1}])
    assert get(service, f"/catalogs/{name}/objects/{uid}", token=None).json()["version"] == 2**63 - 1


# -- /verify validates its body as a batch does -----------------------------------------------------

@pytest.mark.parametrize("body", [
    {"entries": [{"uid": 1}]},
    {"entries": [{"op": "index", "uid": "u"}]},
    {"entries": "x"},
    {"entries": [{"op": "unindex", "uid": "u", "version": 2**64}]},
])
def test_verify_with_entries_the_batch_model_refuses_is_422(service, name, body):
    assert_problem(post(service, f"/catalogs/{name}/verify", token=None, json=body), 422)


def test_verify_still_answers(service, name):
    response = post(service, f"/catalogs/{name}/verify", token=None, json={"entries": [entry("a", "/plone/a")]})
    assert response.status_code == 200, response.text
    assert "a" in response.json()["results"]


# -- strict booleans ----------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["yes", "true", 1, "1", "on"])
def test_a_clear_flag_that_is_no_boolean_is_422_and_clears_nothing(service, name, flag):
    response = post(service, f"/catalogs/{name}/batches", token=None,
                    json={"batch_id": uuid.uuid4().hex, "entries": [], "clear": flag})
    assert_problem(response, 422)
    assert get(service, f"/catalogs/{name}/objects/a", token=None).status_code == 200


@pytest.mark.parametrize("body", [
    {"query": {}, "show_inactive": "yes"},
    {"query": {}, "show_inactive": 1},
])
def test_other_flags_are_strict_too(service, name, body):
    assert_problem(post(service, f"/catalogs/{name}/query", token=None, json=body), 422)
    assert_problem(raw(service, "PATCH", f"/catalogs/{name}/schema", _json({"only_add": "no"})), 422)
    assert_problem(post(service, f"/catalogs/{name}/tokens", token=None,
                        json={"principals": ["Anonymous"], "show_inactive": "no"}), 422)


# -- 405 ---------------------------------------------------------------------------------------------

def test_a_405_allows_the_methods_of_every_route_of_the_path(service, name):
    import httpx

    response = httpx.request("OPTIONS", f"{service.url}/catalogs/{name}", timeout=10)
    assert_problem(response, 405)
    assert {m.strip() for m in response.headers["allow"].split(",")} == {"GET", "DELETE"}
    response = httpx.put(f"{service.url}/catalogs/{name}/batches/resolver", timeout=10)
    assert response.status_code != 405  # PUT is one of its methods (here: refused for the credential)
    response = httpx.delete(f"{service.url}/catalogs/{name}/batches/resolver", timeout=10)
    assert {m.strip() for m in response.headers["allow"].split(",")} == {"GET", "PUT"}
    response = httpx.put(f"{service.url}/search?catalog={name}", timeout=10)
    assert_problem(response, 405)
    assert {m.strip() for m in response.headers["allow"].split(",")} == {"GET", "POST"}


# -- fuzz ----------------------------------------------------------------------------------------------

nasty_text = st.sampled_from(["\x00", "a\x00b", "\ud7ff", "%00", "../", "\\", "\u2028", "x" * 300, ""])
nasty_numbers = st.sampled_from(["1e400", "-1e400", "NaN", "Infinity", str(2**63), str(2**64), str(-(2**63) - 1),
                                 "1e-400", "-0", "0.5", "18446744073709551616"])
nasty_flags = st.sampled_from(['"yes"', '"no"', "1", "0", "null", '"true"', "[]", "{}"])


def _literal(value: str, kind: str) -> str:
    import json

    return json.dumps(value) if kind == "text" else value


fields = st.one_of(
    st.tuples(st.sampled_from(["uid", "path", "batch_id"]), nasty_text.map(lambda v: _literal(v, "text"))),
    st.tuples(st.sampled_from(["version"]), nasty_numbers),
    st.tuples(st.sampled_from(["clear"]), nasty_flags),
    st.tuples(st.sampled_from(["value", "meta"]), st.one_of(nasty_numbers, nasty_text.map(lambda v: _literal(v, "text")))),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=fields)
def test_fuzzed_batches_never_500(service, name, bad):
    field, literal = bad
    parts = {"uid": '"f"', "path": '"/plone/f"', "batch_id": f'"{uuid.uuid4().hex}"', "version": "1",
             "clear": "false", "value": '"Document"', "meta": '"t"'}
    parts[field] = literal
    body = ('{{"batch_id":{batch_id},"clear":{clear},"entries":[{{"op":"index","uid":{uid},"path":{path},'
            '"version":{version},"values":{{"portal_type":{value}}},"metadata":{{"Title":{meta}}}}}]}}').format(**parts)
    response = raw(service, "POST", f"/catalogs/{name}/batches", body)
    assert response.status_code < 500, (body, response.text)
    if field == "clear" and response.status_code == 200:
        raise AssertionError(f"clear {literal} was taken as a boolean")


@pytest.mark.parametrize("params", [{"b_start": "-1"}, {"b_size": "-1"}, {"metadata": "a\x00"}])
def test_public_get_search_parameters_the_model_refuses_are_4xx(service, name, params):
    """Found by schemathesis (test_openapi_fuzz.py): GET /search?b_start=-1 answered 500."""
    assert_problem(get(service, "/search", params={"catalog": name, **params}))
