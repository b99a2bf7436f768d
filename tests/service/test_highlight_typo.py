"""Highlighting and typo tolerance on the public routes (docs/api.md, "Highlighting", "Typo
tolerance"), on a real PostgreSQL through the running service.

The security battery is differential: the same probes go to two catalogs with the same visible
objects, one of them also holding private, expired and future objects, each with words of its
own (and near misses of visible words). Every answer, highlights, corrections, did_you_mean and
totals included, must be the same in both, for Anonymous and for a member; and no secret word
may appear in any answer. A member who may see the private object does get its word, so the
check is not passing by never correcting.
"""

from __future__ import annotations

import copy
import datetime as dt
import uuid

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog_service import demo
from catalog_service.text import index_words

PUBLIC_URL = "https://www.example.org"
NOW = dt.datetime.now(dt.UTC)
PAST, LONG_AGO, FUTURE = NOW - dt.timedelta(days=10), NOW - dt.timedelta(days=100), NOW + dt.timedelta(days=30)
TEMPLATE = next(e for e in demo.objects(60, seed=3) if e["values"]["portal_type"] == "Document")
MEMBER = ["Anonymous", "AuthenticatedUsers", "user:anna"]
JOE = ["Anonymous", "AuthenticatedUsers", "user:joe"]

# Words only invisible objects hold (for Anonymous and anna); each is within an edit of a probe.
SECRETS = {"private": "zanzibarite", "expired": "quetzalcoat", "future": "xylophonist"}


def document(oid: str, title: str, text: str, description: str = "", allowed=("Anonymous",), effective=PAST,
             expires=None) -> dict:
    entry = copy.deepcopy(TEMPLATE)
    uid = uuid.uuid5(uuid.NAMESPACE_URL, oid).hex
    path = f"/plone/{oid}"
    values = entry["values"]
    values.update({"allowedRolesAndUsers": list(allowed), "Title": title, "Description": description,
                   "SearchableText": f"{title} {description} {text}", "UID": uid, "getId": oid, "id": oid,
                   "sortable_title": title.lower()[:40], "path": path,
                   "effectiveRange": [effective.isoformat(), expires and expires.isoformat()],
                   "review_state": "published" if "Anonymous" in allowed else "private"})
    entry["metadata"].update({"Title": title, "Description": description, "UID": uid, "id": oid, "getId": oid,
                              "review_state": values["review_state"]})
    entry.update(uid=uid, path=path)
    return entry


VISIBLE = [
    document("party", 'Garden <script>alert("garden")</script> party', "bring the garden tools " * 3,
             description="A museum & garden evening"),
    document("museum", "The Museum", "museum museum at night"),
    document("night", "Night walk", "the river walk at night " + "filler " * 6000 + "bridge at the end"),
    document("accents", "Égalité et café", "liberté égalité fraternité café"),
    document("member-only", "Members", "members museum corner", allowed=("AuthenticatedUsers",)),
]
INVISIBLE = [
    document("private", "Board minutes", f"{SECRETS['private']} museums gardenz", allowed=("Manager", "user:joe")),
    document("expired", "Old news", f"{SECRETS['expired']} museums gardenz", effective=LONG_AGO, expires=PAST),
    document("future", "Coming soon", f"{SECRETS['future']} museums gardenz", effective=FUTURE),
]


def _catalog(live_service, entries) -> tuple[str, str]:
    name = "hl-" + uuid.uuid4().hex[:8]
    with live_service.client() as admin:
        spec = demo.plone_catalog(name, public_url=PUBLIC_URL)
        response = admin.post("/catalogs", json=spec.model_dump(mode="json"))
        assert response.status_code == 201, response.text
        token = response.json()["token"]
        response = admin.post(f"/catalogs/{name}/batches", json={"batch_id": uuid.uuid4().hex, "entries": entries})
        assert response.status_code == 200, response.text
    return name, token


@pytest.fixture(scope="module")
def catalogs(live_service):
    """(with secrets, without secrets): the same visible objects; the first also the invisible ones."""
    made = [_catalog(live_service, VISIBLE + INVISIBLE), _catalog(live_service, VISIBLE)]
    yield made
    with live_service.client() as admin:
        for name, _ in made:
            admin.delete(f"/catalogs/{name}")


def mint(live_service, token: str, name: str, principals: list[str]) -> str:
    with live_service.client(token=token) as connector:
        response = connector.post(f"/catalogs/{name}/tokens", json={"principals": principals})
        assert response.status_code == 200, response.text
        return response.json()["token"]


def search(live_service, name: str, token=False, **params) -> dict:
    with live_service.client(token=token) as client:
        response = client.get("/search", params={"catalog": name, **params})
    assert response.status_code == 200, response.text
    return response.json()


def paths(answer: dict) -> list[str]:
    return [item["path"] for item in answer["items"]]


# -- highlighting --------------------------------------------------------------------------------


def test_highlight_marks_title_description_and_text_escaped(live_service, catalogs):
    name = catalogs[1][0]
    answer = search(live_service, name, SearchableText="garden", highlight="true")
    (item,) = answer["items"]
    marks = item["highlight"]
    assert marks["Title"] == ('<mark>Garden</mark> &lt;script&gt;alert(&quot;<mark>garden</mark>&quot;)'
                              '&lt;/script&gt; party')
    assert marks["Description"] == "A museum &amp; <mark>garden</mark> evening"
    # The body: the stored words (folded), a window around the first match.
    assert marks["SearchableText"].startswith("<mark>garden</mark> script alert <mark>garden</mark> script party")
    assert "<script" not in orjson.dumps(marks).decode()  # the metadata is data, as before: the frontend's to escape


def test_highlight_of_accents_and_long_texts(live_service, catalogs):
    name = catalogs[1][0]
    (item,) = search(live_service, name, SearchableText="egalite", highlight="Title,SearchableText")["items"]
    assert item["highlight"] == {"Title": "<mark>Égalité</mark> et café",
                                 "SearchableText": "<mark>egalite</mark> et cafe liberte <mark>egalite</mark> "
                                                   "fraternite cafe"}
    (item,) = search(live_service, name, SearchableText="bridge", highlight="SearchableText")["items"]
    # The match lies past the words scanned (SCAN_WORDS): no snippet, though the object matches.
    assert item["highlight"] == {}
    (item,) = search(live_service, name, SearchableText="river", highlight="SearchableText")["items"]
    assert item["highlight"]["SearchableText"].startswith("night walk the <mark>river</mark> walk")
    assert item["highlight"]["SearchableText"].endswith("…") and len(item["highlight"]["SearchableText"]) < 400


def test_highlight_on_post_and_restapi_search(live_service, catalogs):
    name = catalogs[1][0]
    with live_service.client(token=False) as client:
        posted = client.post(f"/search?catalog={name}", json={"query": {"Title": "museum"}, "highlight": ["Title"]})
        assert posted.status_code == 200, posted.text
        assert [i["highlight"] for i in posted.json()["items"]] == [{"Title": "The <mark>Museum</mark>"}]
        restapi = client.get(f"/{name}/@search", params={"SearchableText": "museum", "highlight": "Title",
                                                         "sort_on": "getId"})
        assert restapi.status_code == 200, restapi.text
        items = restapi.json()["items"]
        assert [i["highlight"] for i in items] == [{"Title": "The <mark>Museum</mark>"}, {}]
        assert set(items[0]) == {"@id", "@type", "description", "review_state", "title", "type_title", "highlight"}


def test_bad_highlight_parameters_are_refused(live_service, catalogs):
    name = catalogs[1][0]
    with live_service.client(token=False) as client:
        unknown = client.get("/search", params={"catalog": name, "SearchableText": "x", "highlight": "Nope"})
        assert unknown.status_code == 400 and unknown.json()["parameter"] == "highlight"
        assert "SearchableText" in unknown.json()["valid"]
        big = client.get("/search", params={"catalog": name, "SearchableText": "x", "highlight": "1", "b_size": 101})
        assert big.status_code == 400 and big.json()["parameter"] == "b_size"
        # A sort_limit without b_size reads that many brains: the cap holds for it too, on
        # /search and on @search (which shows 25 of them) (review of stop 29).
        capped = client.get("/search", params={"catalog": name, "SearchableText": "x", "highlight": "1",
                                               "sort_on": "getId", "sort_limit": 1000})
        assert capped.status_code == 400, capped.text
        capped = client.get(f"/{name}/@search", params={"SearchableText": "x", "highlight": "1",
                                                        "sort_on": "getId", "sort_limit": 1000})
        assert capped.status_code == 400, capped.text
        typo = client.get("/search", params={"catalog": name, "SearchableText": "x", "typo": "maybe"})
        assert typo.status_code == 400 and typo.json()["parameter"] == "typo"
        body = client.post(f"/search?catalog={name}", json={"query": {}, "typo": "yes"})
        assert body.status_code == 422


# -- typo tolerance ------------------------------------------------------------------------------


def test_a_misspelled_word_finds_what_the_right_word_finds(live_service, catalogs):
    name = catalogs[1][0]
    right = search(live_service, name, SearchableText="museum", sort_on="getId")
    wrong = search(live_service, name, SearchableText="muesum", sort_on="getId", typo="true")
    assert paths(wrong) == paths(right) and wrong["items_total"] == right["items_total"] == 2
    assert wrong["did_you_mean"] == "museum" and wrong["corrections"] == {"muesum": ["museum"]}
    assert all(i["corrected"] for i in wrong["items"])
    # Without typo: nothing, and no new keys.
    plain = search(live_service, name, SearchableText="muesum")
    assert plain == {"items_total": 0, "b_start": 0, "b_size": 25, "items": []}
    # Short words are not corrected; two edits for long words.
    assert search(live_service, name, SearchableText="nigt", typo="1")["corrections"] == {}
    assert search(live_service, name, SearchableText="fratrenitte", typo="1")["did_you_mean"] == "fraternite"
    # Two edits keep the first letter; one edit may change it.
    assert search(live_service, name, SearchableText="vraternitte", typo="1")["corrections"] == {}
    assert search(live_service, name, SearchableText="vraternite", typo="1")["did_you_mean"] == "fraternite"
    # Plone's search form sends the last word as a prefix: the prefix is corrected.
    assert search(live_service, name, SearchableText="garden muesum*", typo="1")["did_you_mean"] == "garden museum*"


def test_corrected_matches_follow_the_exact_ones_across_pages(live_service, catalogs):
    name = catalogs[1][0]
    exact = paths(search(live_service, name, SearchableText="garden", sort_on="getId"))
    fixed = paths(search(live_service, name, SearchableText="museum", sort_on="getId"))
    answer = search(live_service, name, SearchableText="garden OR muesum", sort_on="getId", typo="true")
    expected = exact + [p for p in fixed if p not in exact]
    assert paths(answer) == expected == ["/party", "/museum"] and answer["items_total"] == 2
    assert [i["corrected"] for i in answer["items"]] == [False, True]
    assert answer["did_you_mean"] == "garden OR museum"
    paged = [p for start in range(3) for p in paths(search(
        live_service, name, SearchableText="garden OR muesum", sort_on="getId", typo="true", b_size=1,
        b_start=start))]
    assert paged == expected


def test_typo_on_restapi_search_and_with_highlight(live_service, catalogs):
    name = catalogs[1][0]
    with live_service.client(token=False) as client:
        r = client.get(f"/{name}/@search", params={"SearchableText": "muesum", "typo": "true", "highlight": "Title",
                                                   "sort_on": "getId"})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["did_you_mean"] == "museum" and answer["items_total"] == 2
    assert [i["highlight"] for i in answer["items"]] == [{"Title": "The <mark>Museum</mark>"}, {}]


def test_typo_and_highlight_on_querystring_search(live_service, catalogs):
    name = catalogs[1][0]
    body = {"query": [{"i": "SearchableText", "o": "plone.app.querystring.operation.string.contains",
                       "v": "muesum"}], "sort_on": "getId"}
    with live_service.client(token=False) as client:
        r = client.post(f"/{name}/@querystring-search", params={"typo": "true", "highlight": "Title"}, json=body)
        assert r.status_code == 200, r.text
        answer = r.json()
        # The text query as plone.app.querystring makes it: every word a prefix.
        assert answer["did_you_mean"] == "museum*" and answer["items_total"] == 2
        assert answer["corrections"] == {"muesum": ["museum"]}
        assert [i["highlight"] for i in answer["items"]] == [{"Title": "The <mark>Museum</mark>"}, {}]
        plain = client.post(f"/{name}/@querystring-search", json=body)
        assert plain.json()["items_total"] == 0 and "did_you_mean" not in plain.json()


def test_without_the_parameters_answers_are_byte_identical(live_service, catalogs):
    name = catalogs[0][0]
    with live_service.client(token=False) as client:
        for url, params in [("/search", {"catalog": name, "SearchableText": "garden OR museum"}),
                            ("/search", {"catalog": name, "SearchableText": "muesum"}),
                            (f"/{name}/@search", {"SearchableText": "museum", "sort_on": "getId"})]:
            plain = client.get(url, params=params)
            off = client.get(url, params={**params, "highlight": "false", "typo": "false"})
            assert plain.status_code == off.status_code == 200
            # @search's @id is the URL asked, which names the parameters.
            assert plain.content == off.content.replace(b"&highlight=false&typo=false", b"")
            assert not {"did_you_mean", "corrections"} & set(plain.json())
            assert all(not {"highlight", "corrected"} & set(i) for i in plain.json()["items"])


# -- the security battery ------------------------------------------------------------------------


PROBES = [
    *({"SearchableText": w} for w in SECRETS.values()),
    *({"SearchableText": w[:-1]} for w in SECRETS.values()),  # one edit: a deletion
    *({"SearchableText": w[:3] + w[4] + w[3] + w[5:]} for w in SECRETS.values()),  # a transposition
    *({"SearchableText": w[:-2] + "qq"} for w in SECRETS.values()),  # two substitutions
    *({"SearchableText": f"garden OR {w}x"} for w in SECRETS.values()),
    *({"SearchableText": f"garden {w[:-2]}x*"} for w in SECRETS.values()),  # a prefix, as Plone's form sends
    {"SearchableText": "gardenz*"},  # a prefix only invisible objects' words have
    {"SearchableText": "museums"},  # held by invisible objects only, one edit from 'museum'
    {"SearchableText": "gardenz"},  # the same, one edit from 'garden'
    {"SearchableText": "museumz"},  # one edit from both 'museum' and 'museums'
    {"SearchableText": "gardenzz"},  # so is 'gardenz', one edit from it
    {"SearchableText": "garden AND museumq"},
    {"SearchableText": "minutes"},  # the private object's Title
    {"Title": "minutez"},
    {"Title": "boardd OR museum"},
]


def _comparable(answer: dict) -> dict:
    """The answer without what differs between the two catalogs anyway: Okapi scores count every
    document of the index, as ZCatalog's do."""
    return {**answer, "items": [{k: v for k, v in item.items() if k != "score"} for item in answer["items"]]}


@pytest.mark.parametrize("who", ["anonymous", "member"])
def test_no_highlight_or_correction_reveals_invisible_content(live_service, catalogs, who):
    (secret, secret_token), (clean, clean_token) = catalogs
    tokens = [False, False] if who == "anonymous" else [mint(live_service, secret_token, secret, MEMBER),
                                                        mint(live_service, clean_token, clean, MEMBER)]
    for probe in PROBES:
        for extra in ({"typo": "true"}, {"typo": "true", "highlight": "true"}, {"highlight": "true"}):
            params = {**probe, **extra, "sort_on": "getId"}
            with_secrets = search(live_service, secret, tokens[0], **params)
            without = search(live_service, clean, tokens[1], **params)
            assert _comparable(with_secrets) == _comparable(without), (who, params)
            body = orjson.dumps(with_secrets).decode()
            asked = " ".join(probe.values()).lower()
            for word in (*SECRETS.values(), "museums", "gardenz", "minutes", "Board"):
                # The caller's own words come back (as the corrected word), no other secret.
                assert word.lower() in asked or word not in body, (who, params, word)
    # The same probes through @search.
    for probe in PROBES[:6]:
        params = {**probe, "typo": "true", "highlight": "true", "sort_on": "getId"}
        answers = []
        for (name, _), token in zip(catalogs, tokens, strict=True):
            with live_service.client(token=token) as client:
                response = client.get(f"/{name}/@search", params=params)
            assert response.status_code == 200, response.text
            answers.append({k: v for k, v in response.json().items() if k != "@id"})
        assert answers[0] == answers[1], (who, params)


WORDS = sorted({w for e in VISIBLE + INVISIBLE for w in index_words(e["values"]["SearchableText"]) if len(w) >= 5})


def _edited(word: str, edits: list[tuple[int, int, str]]) -> str:
    """``word`` with each (kind, position, letter) edit applied: 0 delete, 1 substitute, 2 insert,
    3 swap with the next letter."""
    for kind, position, letter in edits:
        at = position % (len(word) + 1)
        if kind == 0:
            word = word[:at] + word[at + 1:]
        elif kind == 1:
            word = word[:at] + letter + word[at + 1:]
        elif kind == 2:
            word = word[:at] + letter + word[at:]
        elif at + 1 < len(word):
            word = word[:at] + word[at + 1] + word[at] + word[at + 2:]
    return word or "x"


probes = st.builds(
    lambda word, edits, visible, star, joiner: (f"{visible}{joiner}" if joiner else "") + _edited(word, edits)
    + ("*" if star else ""),
    st.sampled_from(WORDS),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 12), st.sampled_from("aeiourstnz")), max_size=2),
    st.sampled_from(["garden", "museum", "night"]), st.booleans(), st.sampled_from(["", " ", " OR "]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=probes, member=st.booleans())
def test_generated_probes_answer_as_without_the_invisible_objects(live_service, catalogs, text, member):
    """Misspellings (up to two edits) of every word of the corpus, visible or not, alone or with a
    visible word: the same answers with and without the invisible objects."""
    (secret, secret_token), (clean, clean_token) = catalogs
    tokens = [False, False]
    if member:
        tokens = [_member_tokens.setdefault(n, mint(live_service, t, n, MEMBER))
                  for n, t in ((secret, secret_token), (clean, clean_token))]
    params = {"SearchableText": text, "typo": "true", "highlight": "true", "sort_on": "getId"}
    answers = [search(live_service, name, token, **params) for name, token in zip((secret, clean), tokens,
                                                                                     strict=True)]
    assert _comparable(answers[0]) == _comparable(answers[1]), params


_member_tokens: dict[str, str] = {}


def test_a_member_who_may_see_the_private_object_gets_its_word(live_service, catalogs):
    secret, token = catalogs[0]
    joe = mint(live_service, token, secret, JOE)
    answer = search(live_service, secret, joe, SearchableText="zanzibarit", typo="true", highlight="SearchableText")
    assert answer["did_you_mean"] == "zanzibarite"
    assert paths(answer) == ["/private"]
    assert "<mark>zanzibarite</mark>" in answer["items"][0]["highlight"]["SearchableText"]
    # The member-only object is visible to members: its word is corrected for them, not for Anonymous.
    assert search(live_service, secret, joe, SearchableText="memebrs", typo="1")["did_you_mean"] == "members"
    assert search(live_service, secret, SearchableText="memebrs", typo="1")["did_you_mean"] is None


def test_without_fuzzystrmatch_corrections_are_one_edit(live_service, catalogs):
    """The database without the extension (as where it may not be created): one-edit corrections
    still, by generated words; two-edit ones are missing, and nothing fails."""
    import asyncio

    import asyncpg

    async def extension(sql: str) -> None:
        conn = await asyncpg.connect(live_service.database_url)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    name = catalogs[1][0]
    assert search(live_service, name, SearchableText="fratrenitte", typo="1")["did_you_mean"] == "fraternite"
    asyncio.run(extension("drop extension fuzzystrmatch"))
    try:
        assert search(live_service, name, SearchableText="fratrenitte", typo="1")["corrections"] == {}
        assert search(live_service, name, SearchableText="fraternitte", typo="1")["did_you_mean"] == "fraternite"
        assert search(live_service, name, SearchableText="muesum", typo="1")["did_you_mean"] == "museum"
    finally:
        asyncio.run(extension("create extension if not exists fuzzystrmatch"))


def test_a_scoped_key_gets_corrections_and_highlights_from_its_filter_only(live_service, catalogs):
    """A scoped key (docs/decisions/0020) sees the catalog as if it held only its filter's objects:
    a word held only outside the filter is never proposed, and a word corrected there is one the
    filter's objects hold."""
    name = catalogs[0][0]
    with live_service.client() as admin:
        created = admin.post(f"/catalogs/{name}/keys", json={"name": "museum only", "filter": {"path": "/plone/museum"}})
        assert created.status_code == 201, created.text
    key = created.json()["key"]
    assert search(live_service, name, SearchableText="gardne", typo="1")["did_you_mean"] == "garden"
    outside = search(live_service, name, key, SearchableText="gardne", typo="1", highlight="true")
    assert outside == {"items_total": 0, "b_start": 0, "b_size": 25, "items": [], "did_you_mean": None,
                       "corrections": {}}
    inside = search(live_service, name, key, SearchableText="garden OR muesum", typo="1", highlight="Title")
    assert paths(inside) == ["/museum"] and inside["did_you_mean"] == "garden OR museum"
    assert [i["highlight"] for i in inside["items"]] == [{"Title": "The <mark>Museum</mark>"}]
