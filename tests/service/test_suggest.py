"""The suggest routes (GET /{catalog}/@suggest, GET /suggest): their conventions, a differential
test against a brute-force computation over the visible objects, and the security battery (a
word or title that only private, expired or future content holds is never suggested)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from catalog_schemas.api import IndexDeclaration
from catalog_service.store.suggest import CANDIDATES
from catalog_service.text import index_words
from tests.live import start_service
from tests.service.test_api import INDEXES, NOW, entry
from tests.service.test_review_support import commit_batch, get, new_catalog, post

# Title is a text index without score cells: its words are probed through the word's own entry.
SUGGEST_INDEXES = [*INDEXES, IndexDeclaration(name="sortable_title", type="FieldIndex"),
                   IndexDeclaration(name="Title", type="ZCTextIndex")]
METADATA = ("Title", "UID")
PAST = NOW - timedelta(days=2)
FUTURE = NOW + timedelta(days=2)
MEMBER = ["Anonymous", "Authenticated", "Member", "user:bob"]


def item(uid, title, text, allowed=("Anonymous",), effective=PAST, expires=None, portal_type="Document"):
    made = entry(uid, f"/plone/{uid}", portal_type=portal_type, allowed=allowed, effective=effective,
                 expires=expires, text=text)
    made["values"]["sortable_title"] = title.lower()
    made["values"]["Title"] = title
    made["metadata"] = {"Title": title, "UID": f"UID-{uid}"}
    return made


ALLOWED_ORIGIN = "http://frontend.example"


@pytest.fixture(scope="module")
def service(database_url):
    live = start_service(database_url, extra_env={"CATALOG_CORS_ORIGINS": f'["{ALLOWED_ORIGIN}"]'})
    yield live
    live.stop()


def new_suggest_catalog(service) -> tuple[str, str]:
    with service.client() as admin:
        return new_catalog(admin, indexes=SUGGEST_INDEXES, metadata=METADATA)


def member_token(service, name: str, connector_token: str, principals=MEMBER) -> str:
    response = post(service, f"/catalogs/{name}/tokens", token=connector_token, json={"principals": principals})
    assert response.status_code == 200, response.text
    return response.json()["token"]


def suggest(service, name: str, q: str, token: str | bool = False, **params):
    response = get(service, f"/{name}/@suggest", token=token, params={"q": q, **params})
    assert response.status_code == 200, response.text
    return response.json()


def words_of(answer) -> list[str]:
    return [w["word"] for w in answer["words"]]


def titles_of(answer) -> list[str]:
    return [t["title"] for t in answer["titles"]]


# -- the security battery ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def secrets(service):
    """Public content, and one secret word and title in each kind of content Anonymous may not see;
    ``bob`` may see the second private document (shared with him)."""
    name, token = new_suggest_catalog(service)
    commit_batch(service, name, [
        item("public", "Quarterly report", "quarterly report garden"),
        item("private", "Quartermaster secret", "quartermaster merger", allowed=["Manager"]),
        item("shared", "Quasar shared", "quasar project", allowed=["Manager", "user:bob"]),
        item("expired", "Quench expired", "quenched layoffs", expires=NOW - timedelta(days=1)),
        item("future", "Quest future", "questionable launch", effective=FUTURE),
    ])
    return name, token


SECRET_WORDS = ["quartermaster", "merger", "quenched", "layoffs", "questionable", "launch"]
SECRET_TITLES = ["Quartermaster secret", "Quench expired", "Quest future"]
SECRET_TITLE_WORDS = ["quartermaster", "secret", "quench", "expired", "quest", "future", "quasar", "shared"]


@pytest.mark.parametrize("q", ["q", "qu", "qua", "quar", "quart", "quarte", "que", "ques", "m", "me", "l", "la"])
def test_anonymous_never_gets_words_or_titles_of_hidden_content(service, secrets, q):
    name, _ = secrets
    answer = suggest(service, name, q)
    assert not set(words_of(answer)) & set(SECRET_WORDS + ["quasar", "project"])
    assert not set(titles_of(answer)) & set(SECRET_TITLES + ["Quasar shared"])


@pytest.mark.parametrize("q", ["q", "qu", "que", "s", "se", "e", "f"])
def test_title_words_of_hidden_content_are_never_completed(service, secrets, q):
    name, _ = secrets
    answer = suggest(service, name, q, index="Title")
    assert not set(words_of(answer)) & set(SECRET_TITLE_WORDS)


def test_title_words_of_public_content_are_completed(service, secrets):
    name, _ = secrets
    assert words_of(suggest(service, name, "qu", index="Title")) == ["quarterly"]
    assert words_of(suggest(service, name, "r", index="Title")) == ["report"]


def test_anonymous_gets_the_public_words_and_title(service, secrets):
    name, _ = secrets
    answer = suggest(service, name, "qua")
    assert words_of(answer) == ["quarterly"]
    assert titles_of(answer) == ["Quarterly report"]
    assert answer["titles"][0]["UID"] == "UID-public"
    assert answer["titles"][0]["path"] == "/public"


@pytest.mark.parametrize("q", ["q", "qua", "que", "ques", "m", "l"])
def test_member_sees_what_their_roles_allow(service, secrets, q):
    name, token = secrets
    answer = suggest(service, name, q, token=member_token(service, name, token))
    assert not set(words_of(answer)) & set(SECRET_WORDS)
    assert not set(titles_of(answer)) & set(SECRET_TITLES)


def test_member_gets_content_shared_with_them(service, secrets):
    name, token = secrets
    answer = suggest(service, name, "qua", token=member_token(service, name, token))
    assert sorted(words_of(answer)) == ["quarterly", "quasar"]
    assert titles_of(answer) == ["Quarterly report", "Quasar shared"]
    other = suggest(service, name, "qua", token=member_token(service, name, token, ["Anonymous", "user:eve"]))
    assert words_of(other) == ["quarterly"]


def test_a_token_for_inactive_content_still_gets_effective_content_only(service, secrets):
    name, token = secrets
    response = post(service, f"/catalogs/{name}/tokens", token=token,
                    json={"principals": ["Anonymous"], "show_inactive": True})
    assert response.status_code == 200, response.text
    answer = suggest(service, name, "que", token=response.json()["token"])
    assert words_of(answer) == [] and titles_of(answer) == []


def test_query_parameters_cannot_widen_security(service, secrets):
    name, _ = secrets
    response = get(service, f"/{name}/@suggest", params={"q": "quar", "allowedRolesAndUsers": "Manager"})
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"


def test_a_word_whose_last_visible_holder_goes_private_is_no_longer_suggested(service):
    name, _ = new_suggest_catalog(service)
    commit_batch(service, name, [item("a", "Zeppelin", "zeppelin")])
    assert words_of(suggest(service, name, "zep")) == ["zeppelin"]
    commit_batch(service, name, [{**item("a", "Zeppelin", "zeppelin", allowed=["Manager"]), "version": 2}])
    answer = suggest(service, name, "zep")
    assert words_of(answer) == [] and titles_of(answer) == []


def test_a_scoped_key_gets_suggestions_from_its_filter_only(service):
    name, _ = new_suggest_catalog(service)
    commit_batch(service, name, [item("doc", "Nebula document", "nebula"),
                                 item("news", "Nectar news", "nectarine", portal_type="News Item")])
    created = post(service, f"/catalogs/{name}/keys", token=None,
                   json={"name": "documents only", "filter": {"portal_type": "Document"}})
    assert created.status_code == 201, created.text
    scoped = suggest(service, name, "ne", token=created.json()["key"])
    assert words_of(scoped) == ["nebula"] and titles_of(scoped) == ["Nebula document"]
    anonymous = suggest(service, name, "ne")
    assert sorted(words_of(anonymous)) == ["nebula", "nectarine"]


# -- the route's conventions ---------------------------------------------------------------------


def test_both_routes_give_the_same_suggestions(service, secrets):
    name, _ = secrets
    at = get(service, f"/{name}/@suggest", params={"q": "quarterly r"})
    plain = get(service, "/suggest", params={"catalog": name, "q": "quarterly r"})
    assert at.status_code == plain.status_code == 200
    assert at.json()["words"] == plain.json()["words"] == [{"word": "report"}]
    assert at.json()["titles"] == plain.json()["titles"]
    assert [t["title"] for t in at.json()["titles"]] == ["Quarterly report"]


def test_accents_and_case_are_folded_as_the_lexicon_folds_them(service, secrets):
    name, _ = secrets
    assert words_of(suggest(service, name, "GÄRD")) == ["garden"]


def test_etag_and_304(service, secrets):
    name, _ = secrets
    first = get(service, f"/{name}/@suggest", params={"q": "qua"})
    assert first.status_code == 200 and first.headers["etag"]
    again = get(service, f"/{name}/@suggest", params={"q": "qua"}, headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304
    other = get(service, f"/{name}/@suggest", params={"q": "quar"}, headers={"If-None-Match": first.headers["etag"]})
    assert other.status_code == 200


@pytest.mark.parametrize("params, parameter", [
    ({}, "q"),
    ({"q": "x", "limit": "0"}, "limit"),
    ({"q": "x", "limit": "51"}, "limit"),
    ({"q": "x", "limit": "many"}, "limit"),
    ({"q": "x" * 201}, "q"),
    ({"q": "a\x00b"}, "q"),
    ({"q": ["a", "b"]}, "q"),
    ({"q": "x", "index": "portal_type"}, "index"),
    ({"q": "x", "sort_on": "Title"}, "sort_on"),
])
def test_bad_parameters_are_400_problems(service, secrets, params, parameter):
    name, _ = secrets
    response = get(service, f"/{name}/@suggest", params=params)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert parameter in response.text


@pytest.mark.parametrize("path", ["/suggest", "/plone/@suggest"])
def test_preflight_and_cors_headers(service, secrets, path):
    name, _ = secrets
    preflight = httpx.options(service.url + path, headers={
        "Origin": ALLOWED_ORIGIN, "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "authorization"})
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    url = f"/{name}/@suggest" if path != "/suggest" else "/suggest"
    params = {"q": "qua"} if path != "/suggest" else {"q": "qua", "catalog": name}
    answer = get(service, url, params=params, headers={"Origin": ALLOWED_ORIGIN})
    assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert "ETag" in answer.headers["access-control-expose-headers"]
    other = get(service, url, params=params, headers={"Origin": "http://evil.example"})
    assert other.status_code == 200 and "access-control-allow-origin" not in other.headers


def test_unknown_catalog_is_404_and_a_bad_token_401(service):
    assert get(service, "/nosuch-catalog/@suggest", params={"q": "x"}).status_code == 404
    name, _ = new_suggest_catalog(service)
    assert get(service, f"/{name}/@suggest", token="not-a-token", params={"q": "x"}).status_code == 401


def test_limit_cuts_words_and_titles(service):
    name, _ = new_suggest_catalog(service)
    commit_batch(service, name, [item(f"o{i}", f"Alpha {i:02}", f"alpha{i:02} alpha") for i in range(20)])
    answer = suggest(service, name, "alpha", limit="3")
    assert len(answer["words"]) == 3 and len(answer["titles"]) == 3
    assert words_of(answer)[0] == "alpha"  # the most frequent first
    assert titles_of(answer) == ["Alpha 00", "Alpha 01", "Alpha 02"]
    assert len(suggest(service, name, "alpha")["words"]) == 10  # the default limit


# -- differential: the brute force over the visible objects --------------------------------------

LETTERS = "abc"
USERS = {"anonymous": ["Anonymous"], "member": MEMBER}
ALLOWED = [("Anonymous",), ("Manager",), ("Manager", "user:bob"), ("Member",), ("Authenticated",)]
WHEN = [(PAST, None), (PAST, NOW - timedelta(days=1)), (FUTURE, None), (None, None), (PAST, FUTURE)]


def visible(obj, principals) -> bool:
    effective, expires = obj["when"]
    return bool(set(obj["allowed"]) & set(principals)) and (effective is None or effective <= NOW) and (
        expires is None or expires >= NOW)


def brute_force(objs, principals, q: str, limit: int):
    """The suggestions by their definition: the lexicon's words (every object's) starting with the
    last typed word, most frequent first, that a visible object holds; the visible objects' titles
    starting with the typed text, in title order."""
    words = index_words(q)
    df: dict[str, int] = {}
    for obj in objs:
        for w in set(index_words(obj["text"])):
            df[w] = df.get(w, 0) + 1
    found = []
    if words:
        candidates = sorted(w for w in df if w.startswith(words[-1]))[:CANDIDATES]
        shown = {w for obj in objs if visible(obj, principals) for w in index_words(obj["text"])}
        found = [w for w in sorted(candidates, key=lambda w: (-df[w], w)) if w in shown][:limit]
    prefix = " ".join(q.lower().split())
    titles = sorted(o["title"] for o in objs if visible(o, principals) and prefix and o["title"].lower().startswith(prefix))
    return found, titles[:limit]


word = st.text(LETTERS, min_size=1, max_size=4)
objects = st.lists(st.fixed_dictionaries({
    "text": st.lists(word, min_size=1, max_size=5).map(" ".join),
    "allowed": st.sampled_from(ALLOWED),
    "when": st.sampled_from(WHEN),
}), min_size=1, max_size=12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(objs=objects, typed=st.lists(st.text(LETTERS + " ", min_size=1, max_size=5), min_size=1, max_size=3),
       limit=st.integers(1, 5))
def test_suggestions_equal_the_brute_force(service, objs, typed, limit):
    name, token = new_suggest_catalog(service)
    for n, obj in enumerate(objs):
        obj["title"] = f"{obj['text'].split()[0].capitalize()} {n:02}"  # unique: title order is total
    commit_batch(service, name, [item(f"o{n}", o["title"], o["text"], allowed=o["allowed"], effective=o["when"][0],
                                      expires=o["when"][1]) for n, o in enumerate(objs)])
    tokens = {"anonymous": False, "member": member_token(service, name, token)}
    for q in typed:
        for user, principals in USERS.items():
            answer = suggest(service, name, q, token=tokens[user], limit=str(limit))
            note(f"{user} {q!r}: {answer}")
            assert (words_of(answer), titles_of(answer)) == brute_force(objs, principals, q, limit)
    with service.client() as admin:
        admin.delete(f"/catalogs/{name}")


def test_catalog_without_text_or_title_index_suggests_nothing(service):
    with service.client() as admin:
        name = "s-" + uuid.uuid4().hex[:10]
        spec = {"id": name, "indexes": [{"name": "allowedRolesAndUsers", "type": "KeywordIndex"}], "metadata": []}
        assert admin.post("/catalogs", json=spec).status_code == 201
    answer = suggest(service, name, "anything")
    assert answer["words"] == [] and answer["titles"] == []


def test_statement_text_depends_on_the_shape_only():
    """Values are parameters (asyncpg's statement cache, and the generic plan made once per
    connection): two prefixes, two callers, one statement text; the typed text never in it."""
    from datetime import UTC, datetime

    from catalog_service.indexes import make_index
    from catalog_service.planner.plan import CatalogSchema, Limits, Security
    from catalog_service.store.suggest import Typed, suggest_sql

    indexes = {d.name: make_index(d) for d in SUGGEST_INDEXES}
    schema = CatalogSchema(catalog_id=7, table="catalog_object_7", indexes=indexes)
    now = datetime.now(UTC)
    one, params_one = suggest_sql(schema, indexes["SearchableText"], Typed.of("Garden pa"),
                                  Security(("Anonymous",), now), Limits(), 10)
    two, params_two = suggest_sql(schema, indexes["SearchableText"], Typed.of("x'); drop"),
                                  Security(("Anonymous", "user:bob"), now), Limits(), 3)
    assert one == two
    assert "pa" in params_one and "garden pa" in params_one and "drop" not in one
    assert params_one != params_two
