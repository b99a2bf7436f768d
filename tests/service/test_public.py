"""The public contract on a real PostgreSQL: plain JSON values (hypothesis over the connector's
wire encoding), the demo catalog's shapes, strictness, values typed per index, batching."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import uuid

import httpx
import Missing
import orjson
import pytest
from DateTime import DateTime
from hypothesis import given
from hypothesis import strategies as st
from plone.restapi.serializer.converters import datetimelike_to_iso

from catalog_schemas.public_values import public_metadata, public_value, wire_datetime
from catalog_service import demo
from plone_connector.catalog.wire import encode_metadata
from tests.live import start_service

PUBLIC_URL = "https://www.example.org"


# -- values --------------------------------------------------------------------------------------


def restapi_form(value):
    """What plone.restapi's json_compatible makes of a metadata value (its converters, written out:
    they need the component registry), with the service's two documented differences: a
    non-finite float is null, a naive DateTime is given in UTC with its offset."""
    if value is None or value is Missing.Value:
        return None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, DateTime):
        if value.timezoneNaive():
            return datetimelike_to_iso(DateTime(value.timeTime(), "UTC"))
        return datetimelike_to_iso(value)
    if isinstance(value, dt.datetime | dt.date):
        return datetimelike_to_iso(value)
    if isinstance(value, list | tuple | set | frozenset):
        return [restapi_form(v) for v in (sorted(value, key=repr) if isinstance(value, set | frozenset) else value)]
    if isinstance(value, dict):
        return {(k if isinstance(k, str) else str(restapi_form(k)).lower() if isinstance(k, bool) else str(restapi_form(k))):
                restapi_form(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


zope_dates = st.builds(
    lambda seconds, zone, naive: DateTime(seconds, zone) if not naive else DateTime(
        *DateTime(seconds, "UTC").parts()[:6]),
    st.floats(min_value=-2e9, max_value=4e9, allow_nan=False).map(lambda s: round(s, 3)),
    st.sampled_from(["UTC", "GMT+1", "GMT-5", "US/Eastern", "Europe/Berlin", "Asia/Kolkata"]),
    st.booleans())
aware = st.datetimes(min_value=dt.datetime(1900, 1, 2), max_value=dt.datetime(2400, 1, 1),
                     timezones=st.sampled_from([dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30)),
                                                dt.timezone(-dt.timedelta(hours=8))]))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**53, 2**53), st.floats(), st.text(max_size=20),
                    st.just(Missing.Value), zope_dates, aware, st.dates(), st.binary(max_size=20),
                    st.decimals(allow_nan=False, allow_infinity=False, places=3))
keys = st.one_of(st.text(max_size=5), st.integers(-5, 5))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
    st.frozensets(st.integers(0, 9), max_size=4), st.sets(st.text(max_size=3), max_size=4),
    st.dictionaries(keys, inner, max_size=3)), max_leaves=12)


def tags_in(shown) -> bool:
    if isinstance(shown, dict):
        return "@t" in shown or any(tags_in(v) for v in shown.values())
    if isinstance(shown, list):
        return any(tags_in(v) for v in shown)
    return False


@given(values)
def test_public_values_are_plone_restapis_json(value):
    stored = orjson.loads(orjson.dumps(encode_metadata(value)))  # as it comes back from jsonb
    shown = public_value(stored)
    assert not tags_in(shown)
    assert orjson.loads(orjson.dumps(shown)) == shown  # plain JSON
    assert shown == restapi_form(value)


def test_dates_are_utc_with_offset_and_whole_seconds():
    berlin = DateTime("2025/03/01 10:00:00.5 Europe/Berlin")
    assert public_value(encode_metadata(berlin)) == "2025-03-01T09:00:00+00:00"
    assert public_value(encode_metadata(DateTime("1900/01/01 00:00 UTC"))) == "1900-01-01T00:00:00+00:00"
    assert public_value(wire_datetime(dt.datetime(2025, 3, 1, 9, 0, 0, 999999, tzinfo=dt.UTC))) \
        == "2025-03-01T09:00:00+00:00"
    assert public_metadata({"a": {"@t": "missing"}, "b": {"@t": "from-a-newer-connector", "v": 1}}) \
        == {"a": None, "b": None}
    with pytest.raises(ValueError, match="aware"):
        wire_datetime(dt.datetime(2025, 1, 1))


def test_the_demo_stores_the_connectors_encoding():
    entry = next(e for e in demo.objects(300) if e["values"]["portal_type"] == "Event")
    meta = entry["metadata"]
    assert meta["created"]["@t"] == "DateTime" and meta["Subject"]["@t"] == "tuple"
    assert meta["getRemoteUrl"] == {"@t": "missing"}
    shown = public_metadata(meta)
    assert dt.datetime.fromisoformat(shown["created"]) == dt.datetime.fromisoformat(entry["values"]["created"]).replace(
        second=dt.datetime.fromisoformat(entry["values"]["created"]).second, microsecond=0)
    assert shown["Subject"] == entry["values"]["Subject"]
    assert shown["start"].endswith("+00:00")
    assert set(meta) == set(demo.PLONE_METADATA)


# -- the routes ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(live_service):
    """The demo corpus, 400 objects, in a catalog with a public URL."""
    name = "pub-" + uuid.uuid4().hex[:8]
    with live_service.client() as admin:
        spec = demo.plone_catalog(name, public_url=PUBLIC_URL)
        assert admin.post("/catalogs", json=spec.model_dump(mode="json")).status_code == 201
        entries = list(demo.objects(400, seed=7))
        r = admin.post(f"/catalogs/{name}/batches", json={"batch_id": "load", "entries": entries})
        assert r.status_code == 200, r.text
    yield name, entries
    with live_service.client() as admin:
        admin.delete(f"/catalogs/{name}")


@pytest.fixture
def anonymous(live_service):
    with live_service.client(token=False) as client:
        yield client


def visible(entries, **where):
    """The entries Anonymous may see (published, effective, not expired) matching ``where``."""
    now = dt.datetime.now(dt.UTC)
    found = []
    for e in entries:
        v = e["values"]
        since, until = v["effectiveRange"]
        if "Anonymous" not in v["allowedRolesAndUsers"] or since is None or dt.datetime.fromisoformat(since) > now:
            continue
        if until is not None and dt.datetime.fromisoformat(until) <= now:
            continue
        if all(v.get(k) == want for k, want in where.items()):
            found.append(e)
    return found


def problem_of(response: httpx.Response, status: int = 400) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    return response.json()


def test_search_answers_the_public_contract(anonymous, site):
    name, entries = site
    r = anonymous.get("/search", params={"catalog": name, "portal_type": "Document", "sort_on": "sortable_title"})
    assert r.status_code == 200, r.text
    answer = r.json()
    expected = sorted(visible(entries, portal_type="Document"), key=lambda e: e["values"]["sortable_title"])
    assert answer["items_total"] == len(expected) > 25
    assert answer["b_size"] == 25 and len(answer["items"]) == 25  # never the whole catalog
    by_path = {e["path"]: e for e in entries}
    for item, entry in zip(answer["items"], expected, strict=False):
        relative = entry["path"].removeprefix("/plone")
        assert item["path"] == relative
        assert item["@id"] == PUBLIC_URL + relative
        assert item["UID"] == entry["values"]["UID"] == by_path[entry["path"]]["uid"]
        assert item["metadata"]["Subject"] == entry["values"]["Subject"]
        assert dt.datetime.fromisoformat(item["metadata"]["modified"]).utcoffset() == dt.timedelta(0)
        assert not tags_in(item)


def test_search_post_and_metadata_subset(anonymous, site):
    name, entries = site
    r = anonymous.post(f"/search?catalog={name}", json={"query": {"portal_type": "News Item"}, "b_size": 3,
                                                        "metadata": ["created", "Subject"]})
    assert r.status_code == 200, r.text
    for item in r.json()["items"]:
        assert set(item["metadata"]) == {"created", "Subject"}
        assert item["UID"]  # from the UID column, read though not asked
    assert r.json()["items_total"] == len(visible(entries, portal_type="News Item"))


def test_restapi_search_shape_and_batching(anonymous, site, live_service):
    name, entries = site
    r = anonymous.get(f"/{name}/@search", params={"portal_type": "Document", "sort_on": "sortable_title",
                                                  "b_size": "10", "b_start": "10", "metadata_fields": "_all"})
    assert r.status_code == 200, r.text
    answer = r.json()
    expected = sorted(visible(entries, portal_type="Document"), key=lambda e: e["values"]["sortable_title"])
    assert answer["items_total"] == len(expected)
    base = f"{live_service.url}/{name}/@search"
    assert answer["@id"] == f"{base}?portal_type=Document&metadata_fields=_all"
    batching = answer["batching"]
    assert batching["first"].startswith(f"{base}?b_start=0&")
    assert "b_start=20&" in batching["next"] and "b_start=0&" in batching["prev"]
    last = (len(expected) - 1) // 10 * 10
    assert batching["last"].startswith(f"{base}?b_start={last}&")
    assert [i["@id"] for i in answer["items"]] == [PUBLIC_URL + e["path"].removeprefix("/plone")
                                                   for e in expected[10:20]]
    item = answer["items"][0]
    assert {"@id", "@type", "title", "description", "review_state", "type_title", "getPath", "getURL",
            "created", "UID"} <= set(item)
    assert item["type_title"] == "Page" and item["getPath"] == expected[10]["path"]
    assert not tags_in(answer)


def test_restapi_search_default_page_and_fields(anonymous, site):
    name, entries = site
    answer = anonymous.get(f"/{name}/@search").json()
    assert answer["items_total"] == len(visible(entries))
    assert len(answer["items"]) == 25
    assert set(answer["items"][0]) == {"@id", "@type", "title", "description", "review_state", "type_title"}
    answer = anonymous.get(f"/{name}/@search", params={"metadata_fields": ["Subject", "created"]}).json()
    assert set(answer["items"][0]) == {"@id", "@type", "title", "description", "review_state", "type_title",
                                       "Subject", "created"}


def test_values_are_typed_per_index(anonymous, site):
    name, entries = site
    everything = len(visible(entries))
    assert anonymous.get(f"/{name}/@search", params={"exclude_from_nav": "false"}).json()["items_total"] == everything
    assert anonymous.get(f"/{name}/@search", params={"exclude_from_nav": "true"}).json()["items_total"] == 0
    # The integer (a text would be a 400): plone.folder's GopipIndex answers any query with nothing.
    assert anonymous.get(f"/{name}/@search", params={"getObjPositionInParent": "3"}).json()["items_total"] == 0
    comments = len([e for e in visible(entries) if e["values"]["total_comments"] == 2])
    assert anonymous.get(f"/{name}/@search", params={"total_comments": "2"}).json()["items_total"] == comments
    folder = demo.folder_path(0, 400)
    children = [e for e in visible(entries) if e["path"].rsplit("/", 1)[0] == folder]
    for params in ({"path.query": folder, "path.depth": "1"},
                   {"path.query": folder.removeprefix("/plone"), "path.depth:int": "1"},
                   {"path.query:record": folder, "path.depth:record:int": "1"}):
        assert anonymous.get(f"/{name}/@search", params=params).json()["items_total"] == len(children), params
    since = "2023-01-01T00:00:00+00:00"
    later = [e for e in visible(entries) if e["values"]["created"] >= since]
    assert anonymous.get(f"/{name}/@search", params={"created.query:date": "2023/01/01 00:00 UTC",
                                                     "created.range": "min"}).json()["items_total"] == len(later)
    between = [e for e in visible(entries) if since <= e["values"]["created"] <= "2024-01-01T00:00:00+00:00"]
    assert anonymous.get(f"/{name}/@search", params=[("created.query:list:date", "2023-01-01"),
                                                     ("created.query:list:date", "2024-01-01T00:00:00Z"),
                                                     ("created.range", "min:max")]).json()["items_total"] == len(between)
    types = [e for e in visible(entries) if e["values"]["portal_type"] in ("Event", "File")]
    assert anonymous.get(f"/{name}/@search", params={"portal_type:list": ["Event", "File"]}).json()[
        "items_total"] == len(types)
    assert anonymous.get("/search", params={"catalog": name, "exclude_from_nav": "false"}).json()[
        "items_total"] == everything


def test_unknown_names_are_refused_with_the_valid_ones(anonymous, site):
    name, _ = site
    for params, named in (({"foo": "bar"}, "foo"), ({"path.foo": "1"}, "path.foo"),
                          ({"metadata_fields": "nosuchcolumn"}, "metadata_fields"),
                          ({"portal_type:nosuchconverter": "x"}, "portal_type:nosuchconverter")):
        body = problem_of(anonymous.get(f"/{name}/@search", params=params))
        assert body["parameter"] == named and named in body["detail"]
        if named == "foo":
            assert "portal_type" in body["valid"] and "sort_on" in body["valid"]
    body = problem_of(anonymous.get("/search", params={"catalog": name, "foo": "bar"}))
    assert body["parameter"] == "foo" and "Subject" in body["valid"]
    body = problem_of(anonymous.post(f"/search?catalog={name}", json={"query": {"Subjekt": "x"}}))
    assert body["parameter"] == "Subjekt"
    assert "fullobjects" in problem_of(anonymous.get(f"/{name}/@search", params={"fullobjects": "1"}))["detail"]
    for params in ({"exclude_from_nav": "maybe"}, {"getObjPositionInParent": "third"}, {"created": "soon"},
                   {"b_size": "x"}, {"b_size": "100000"}, {"b_size": "0"}, {"path.depth": "deep"}):
        problem_of(anonymous.get(f"/{name}/@search", params=params))
    assert anonymous.get(f"/{name}/@search", params={"SearchableText": "(*)"}).json() == []
    problem_of(anonymous.get("/no-such-catalog/@search"), 404)
    assert anonymous.post(f"/{name}/@search", json={"allowedRolesAndUsers": ["Manager"]}).status_code == 403


def test_lenient_service_drops_unknown_names(database_url, site):
    name, entries = site
    lenient = start_service(database_url, extra_env={"CATALOG_PUBLIC_STRICT": "false"})
    try:
        with lenient.client(token=False) as client:
            answer = client.get(f"/{name}/@search", params={"foo": "bar", "metadata_fields": "nosuch"}).json()
            assert answer["items_total"] == len(visible(entries))
    finally:
        lenient.stop()


def test_catalog_settings_api(live_service, site, anonymous):
    name, entries = site
    with live_service.client() as admin:
        r = admin.patch(f"/catalogs/{name}/settings", json={"public_url": "https://other.example"})
        assert r.status_code == 200, r.text
        assert r.json()["site_path"] == "/plone" and r.json()["type_titles"]["Document"] == "Page"
        item = anonymous.get(f"/{name}/@search", params={"b_size": 1}).json()["items"][0]
        assert item["@id"].startswith("https://other.example/")
        assert admin.patch(f"/catalogs/{name}/settings", json={"public_url": "ftp://x"}).status_code == 400
        assert admin.patch(f"/catalogs/{name}/settings", json={"colour": "red"}).status_code == 400
        assert admin.patch(f"/catalogs/{name}/settings", json={"public_url": None}).json()["public_url"] is None
        item = anonymous.get(f"/{name}/@search", params={"b_size": 1}).json()["items"][0]
        assert item["@id"].startswith(f"{live_service.url}/{name}/")
        assert admin.patch(f"/catalogs/{name}/settings", json={"public_url": PUBLIC_URL}).status_code == 200
        assert admin.get(f"/catalogs/{name}").json()["settings"]["public_url"] == PUBLIC_URL
    # No credential: 401 (with WWW-Authenticate), as for every route that needs one.
    assert anonymous.patch(f"/catalogs/{name}/settings", json={"public_url": None}).status_code == 401
