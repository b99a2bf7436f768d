"""The catalog setting ``language`` (docs/api.md, "Catalog settings"; docs/decisions/0025): its
validation and storage, what it changes in typo corrections and word completions, that without
it the answers are as before, and that the security rules of decisions 0021 and 0022 still hold
with it (the same probes answer the same in a catalog with and without private, expired and
future content)."""

from __future__ import annotations

import uuid

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog_schemas.api import LANGUAGE_CODES
from catalog_service import demo
from catalog_service.text import index_words
from catalog_service.text.languages import LANGUAGES, language
from catalog_service.text.typos import ASCII_LETTERS, edits1
from tests.live import start_service
from tests.service.test_highlight_typo import (
    FUTURE,
    INVISIBLE,
    LONG_AGO,
    PAST,
    PROBES,
    PUBLIC_URL,
    VISIBLE,
    document,
)

HERE = [
    document("city", "Столица", "столица музыка город"),
    document("sea", "Θάλασσα", "θάλασσα ήλιος"),
    document("walk", "The river walk", "there the river walk which theatre thermal witch theses because"),
]
# Words only invisible objects hold, each near a visible word.
HIDDEN = [
    document("private-ru", "Секрет", "столицы музыкант", allowed=("Manager",)),
    document("expired-en", "Old news", "theorem thermos", effective=LONG_AGO, expires=PAST),
    document("future-el", "Soon", "θάλασσες", effective=FUTURE),
]
HIDDEN_WORDS = ["столицы", "музыкант", "theorem", "thermos", "θάλασσες", "секрет"]
LANGUAGES_TESTED = (None, "en", "ru", "el", "zh")


def _catalog(live_service, entries, language: str | None) -> str:
    name = "lang-" + uuid.uuid4().hex[:8]
    spec = demo.plone_catalog(name, public_url=PUBLIC_URL).model_dump(mode="json")
    if language is not None:
        spec["settings"]["language"] = language
    with live_service.client() as admin:
        response = admin.post("/catalogs", json=spec)
        assert response.status_code == 201, response.text
        response = admin.post(f"/catalogs/{name}/batches", json={"batch_id": uuid.uuid4().hex, "entries": entries})
        assert response.status_code == 200, response.text
    return name


@pytest.fixture(scope="module")
def catalogs(live_service):
    """language -> (with the invisible objects, without them): the same visible objects."""
    made = {lang: (_catalog(live_service, VISIBLE + HERE + INVISIBLE + HIDDEN, lang),
                   _catalog(live_service, VISIBLE + HERE, lang)) for lang in LANGUAGES_TESTED}
    yield made
    with live_service.client() as admin:
        for pair in made.values():
            for name in pair:
                admin.delete(f"/catalogs/{name}")


def search(live_service, name: str, **params) -> dict:
    with live_service.client(token=False) as client:
        response = client.get("/search", params={"catalog": name, "sort_on": "getId", **params})
    assert response.status_code == 200, response.text
    return response.json()


def corrections(live_service, name: str, text: str) -> dict:
    return search(live_service, name, SearchableText=text, typo="true")["corrections"]


def suggested(live_service, name: str, q: str, **params) -> list[str]:
    with live_service.client(token=False) as client:
        response = client.get(f"/{name}/@suggest", params={"q": q, **params})
    assert response.status_code == 200, response.text
    return [w["word"] for w in response.json()["words"]]


# -- the setting ---------------------------------------------------------------------------------


def test_the_setting_is_patched_shown_and_kept_across_a_restart(live_service):
    name = _catalog(live_service, [], None)
    with live_service.client() as admin:
        assert admin.get(f"/catalogs/{name}/settings").json()["language"] is None
        patched = admin.patch(f"/catalogs/{name}/settings", json={"language": "RU"})
        assert patched.status_code == 200, patched.text
        assert patched.json()["language"] == "ru"
        # Another setting changed leaves it as it is.
        assert admin.patch(f"/catalogs/{name}/settings", json={"timezone": "Europe/Berlin"}).json()["language"] == "ru"
        assert admin.get(f"/catalogs/{name}").json()["settings"]["language"] == "ru"
    restarted = start_service(live_service.database_url)
    try:
        with restarted.client() as admin:
            assert admin.get(f"/catalogs/{name}/settings").json()["language"] == "ru"
    finally:
        restarted.stop()
    with live_service.client() as admin:
        assert admin.patch(f"/catalogs/{name}/settings", json={"language": None}).json()["language"] is None
        assert admin.get(f"/catalogs/{name}/settings").json()["language"] is None
        admin.delete(f"/catalogs/{name}")


@pytest.mark.parametrize("code", ["xx", "en-US", "english", "", "e" * 36, 7, ["en"]])
def test_an_unknown_language_is_a_problem_naming_the_supported_ones(live_service, code):
    name = _catalog(live_service, [], "de")
    with live_service.client() as admin:
        response = admin.patch(f"/catalogs/{name}/settings", json={"language": code})
        assert response.status_code == 400, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        problem = response.json()
        assert problem["status"] == 400 and problem["errors"][0]["loc"] == ["language"]
        if isinstance(code, str) and len(code) <= 35:
            assert "supported: ar, bg, cs, da, de, el, en" in problem["errors"][0]["msg"]
        assert admin.get(f"/catalogs/{name}/settings").json()["language"] == "de"
        spec = demo.plone_catalog("lang-" + uuid.uuid4().hex[:8]).model_dump(mode="json")
        spec["settings"]["language"] = code
        created = admin.post("/catalogs", json=spec)
        assert created.status_code == 422, created.text
        assert created.headers["content-type"].startswith("application/problem+json")
        admin.delete(f"/catalogs/{name}")


# -- without a language: as before ---------------------------------------------------------------

REQUESTS = [("/search", {"SearchableText": text, "typo": "true", "highlight": "true"})
            for text in ("стлица", "θαλασσα", "whihc", "these", "becauseee", "muesum", "garden OR muesum", "rivre")]
REQUESTS += [("/@suggest", {"q": q}) for q in ("the", "th", "w", "столиц", "θάλ", "gard")]


def _body(live_service, name: str, url: str, params: dict) -> bytes:
    with live_service.client(token=False) as client:
        if url == "/search":
            response = client.get(url, params={"catalog": name, **params})
        else:
            response = client.get(f"/{name}{url}", params=params)
    assert response.status_code == 200, response.text
    return response.content


def test_without_a_language_the_answers_are_as_before(live_service, catalogs):
    """A catalog whose language was set and reset answers byte for byte as one that never had
    one; and what a language would change is there: the stop words completed and used as
    corrections, stop words corrected, Cyrillic and Greek words missing a letter not corrected."""
    never = catalogs[None][1]
    reset = _catalog(live_service, VISIBLE + HERE, "ru")
    with live_service.client() as admin:
        assert admin.patch(f"/catalogs/{reset}/settings", json={"language": None}).status_code == 200
    for url, params in REQUESTS:
        assert _body(live_service, never, url, params) == _body(live_service, reset, url, params).replace(
            reset.encode(), never.encode()), (url, params)
    assert corrections(live_service, never, "стлица") == {} and corrections(live_service, never, "θαλασσα") == {}
    assert corrections(live_service, never, "whihc") == {"whihc": ["which"]}
    assert corrections(live_service, never, "these") == {"these": ["there", "theses"]}
    assert corrections(live_service, never, "becauseee") == {"becauseee": ["because"]}
    assert suggested(live_service, never, "the") == ["the", "theatre", "there", "thermal", "theses"]
    with live_service.client() as admin:
        admin.delete(f"/catalogs/{reset}")


# -- what a language changes ---------------------------------------------------------------------


def test_a_cyrillic_word_missing_a_letter_it_lacks_is_corrected_in_russian(live_service, catalogs):
    russian, plain, english = catalogs["ru"][1], catalogs[None][1], catalogs["en"][1]
    answer = search(live_service, russian, SearchableText="стлица", typo="true")
    assert answer["corrections"] == {"стлица": ["столица"]} and answer["did_you_mean"] == "столица"
    assert [i["path"] for i in answer["items"]] == ["/city"] and answer["items"][0]["corrected"] is True
    # A substitution by a letter the word lacks, and a capitalised query (folded as the lexicon folds it).
    assert corrections(live_service, russian, "стокица") == {"стокица": ["столица"]}
    assert search(live_service, russian, SearchableText="СТЛИЦА", typo="true")["did_you_mean"] == "столица"
    # Without a language, or in a Latin one: ASCII letters and the word's own only.
    for other in (plain, english):
        assert corrections(live_service, other, "стлица") == {}
        assert corrections(live_service, other, "стокица") == {}
    # Latin words keep their corrections in a Russian catalog.
    assert corrections(live_service, russian, "rivre") == {"rivre": ["river"]}
    assert corrections(live_service, russian, "muesum") == {"muesum": ["museum"]}


def test_a_greek_word_without_its_accent_is_corrected_in_greek(live_service, catalogs):
    assert corrections(live_service, catalogs["el"][1], "θαλασσα") == {"θαλασσα": ["θάλασσα"]}
    assert corrections(live_service, catalogs[None][1], "θαλασσα") == {}


def test_chinese_gives_no_corrections(live_service, catalogs):
    chinese = catalogs["zh"][1]
    for text in ("muesum", "стлица", "whihc", "garden OR muesum"):
        answer = search(live_service, chinese, SearchableText=text, typo="true")
        assert answer["corrections"] == {} and answer["did_you_mean"] is None
        assert not any(i["corrected"] for i in answer["items"])
    assert corrections(live_service, catalogs[None][1], "muesum") == {"muesum": ["museum"]}
    # Completions are as without a language (no stop words).
    assert suggested(live_service, chinese, "the") == suggested(live_service, catalogs[None][1], "the")


def test_english_stop_words_are_never_completed_corrected_or_corrections(live_service, catalogs):
    english = catalogs["en"][1]
    assert suggested(live_service, english, "the") == ["theatre", "thermal", "theses"]
    assert suggested(live_service, english, "wh") == []
    assert suggested(live_service, english, "w") == ["walk", "witch"]
    assert suggested(live_service, english, "the", index="Title") == []
    assert suggested(live_service, english, "riv") == ["river"]
    # A correction that is a stop word is left out (one edit, and two edits for a long word).
    assert corrections(live_service, english, "whihc") == {}
    assert corrections(live_service, english, "becauseee") == {}
    # A stop word the catalog lacks is not corrected ("theses" is one edit from it).
    assert corrections(live_service, english, "these") == {}
    assert corrections(live_service, english, "these thermak") == {"thermak": ["thermal"]}
    # Other words as before.
    assert corrections(live_service, english, "muesum") == {"muesum": ["museum"]}
    # Titles still start with a stop word.
    with live_service.client(token=False) as client:
        titles = client.get(f"/{english}/@suggest", params={"q": "the r"}).json()["titles"]
    assert [t["title"] for t in titles] == ["The river walk"]


# -- security ------------------------------------------------------------------------------------

LANGUAGE_PROBES = [
    *PROBES,
    *({"SearchableText": w} for w in ("стлицы", "столицы", "музыкан", "музыкнт", "theorm", "thermo", "thermoz",
                                      "θάλασσε", "θαλασσες", "секре", "theorem")),
    {"SearchableText": "музыкнт*"}, {"SearchableText": "garden OR theorme"}, {"Title": "секет"},
]
SUGGEST_PROBES = ["с", "сто", "столиц", "муз", "музык", "the", "theo", "therm", "θ", "θάλασσ", "zanz", "quet",
                  "xylo", "mus", "gardenz", "секр"]


def _comparable(answer: dict) -> dict:
    """Without the Okapi scores (they count every document of the index, as ZCatalog's do)."""
    return {**answer, "items": [{k: v for k, v in item.items() if k != "score"} for item in answer["items"]]}


def _suggestion(live_service, name: str, q: str) -> dict:
    with live_service.client(token=False) as client:
        response = client.get(f"/{name}/@suggest", params={"q": q})
    assert response.status_code == 200, response.text
    return {k: v for k, v in response.json().items() if k != "@id"}


@pytest.mark.parametrize("lang", ["en", "ru", "el"])
def test_with_a_language_nothing_only_hidden_content_holds_is_offered(live_service, catalogs, lang):
    secret, clean = catalogs[lang]
    for probe in LANGUAGE_PROBES:
        params = {**probe, "typo": "true"}
        with_hidden = search(live_service, secret, **params)
        assert _comparable(with_hidden) == _comparable(search(live_service, clean, **params)), (lang, params)
        body = orjson.dumps(with_hidden).decode().lower()
        asked = " ".join(probe.values()).lower()
        for word in HIDDEN_WORDS:
            assert word in asked or word not in body, (lang, params, word)
    for q in SUGGEST_PROBES:
        answer = _suggestion(live_service, secret, q)
        assert answer == _suggestion(live_service, clean, q), (lang, q)
        assert not set(w["word"] for w in answer["words"]) & set(HIDDEN_WORDS), (lang, q)
    # The check is not passing by never correcting: visible words are corrected in this language.
    assert search(live_service, secret, SearchableText="thermak", typo="true")["did_you_mean"] == "thermal"


WORDS = sorted({w for e in HERE + HIDDEN for w in index_words(e["values"]["SearchableText"]) if len(w) >= 5})
RUSSIAN_GREEK = LANGUAGES["ru"].letters + LANGUAGES["el"].letters


def _edited(word: str, kind: int, position: int, letter: str) -> str:
    at = position % len(word)
    return [word[:at] + word[at + 1:], word[:at] + letter + word[at + 1:], word[:at] + letter + word[at:],
            word[:at] + word[at + 1:at + 2] + word[at] + word[at + 2:]][kind]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(word=st.sampled_from(WORDS), kind=st.integers(0, 3), position=st.integers(0, 12),
       letter=st.sampled_from(RUSSIAN_GREEK + "aeirst"), lang=st.sampled_from(["en", "ru", "el"]))
def test_generated_misspellings_answer_as_without_the_hidden_content(live_service, catalogs, word, kind, position,
                                                                     letter, lang):
    secret, clean = catalogs[lang]
    params = {"SearchableText": _edited(word, kind, position, letter), "typo": "true"}
    assert _comparable(search(live_service, secret, **params)) == _comparable(search(live_service, clean, **params))


# -- the table -----------------------------------------------------------------------------------


def test_every_accepted_code_has_a_profile():
    assert sorted(LANGUAGES) == sorted(LANGUAGE_CODES)
    # A word that lost its one Greek letter is digits only: still Greek candidates (found by Hypothesis).
    assert "ΐ0000" in edits1("0000", LANGUAGES["el"].letters_for("0000"))
    assert LANGUAGES["el"].letters_for("mp3") == ASCII_LETTERS
    assert language(None) is None and language("ru") is LANGUAGES["ru"]
    assert {c for c, p in LANGUAGES.items() if not p.corrects} == {"zh", "ja", "ko", "th", "lo", "km", "my"}


LATIN = {"en", "de", "fr", "es", "it", "nl", "pt", "pl", "sv", "da", "no", "fi", "cs"}


@pytest.mark.parametrize("code", sorted(LANGUAGES))
def test_letters_and_stop_words_are_as_the_lexicon_holds_them(code):
    profile = LANGUAGES[code]
    for letter in profile.letters:
        assert index_words(letter) == [letter], (code, letter)
    for word in profile.stop_words:
        assert index_words(word) == [word], (code, word)
    if profile.corrects:
        assert 30 <= len(profile.stop_words) <= 80
        if code in LATIN:
            assert profile.letters == ASCII_LETTERS
        else:
            assert set("0123456789") <= set(profile.letters) and profile.letters.isalnum()
            assert not set(profile.letters) & set(ASCII_LETTERS) - set("0123456789")
    # What a word of the language's own script folds to is made of the profile's letters.
    script = {"ru": "Ёлка Йод Щука Объём", "uk": "Їжак Ґанок Єдність", "bg": "Щъркел Юг",
              "el": "Ώρα Ϊόν Ύψος Άσος Έρως Ήλιος Όχι ΐ ΰ Σοφός", "he": "שלום ךםןףץ", "ar": "السلام ءآأؤإئة ى"}
    for word in index_words(script.get(code, "")):
        assert set(word) <= set(profile.letters), (code, word)


@pytest.mark.parametrize("code", ["ru", "uk", "bg", "el", "he", "ar"])
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_one_edit_in_the_alphabet_is_undone_by_the_candidates(code, data):
    """Every word of the language's letters, edited once with a letter of the alphabet (deleted,
    substituted, inserted, swapped), has the word among its one-edit candidates in that language;
    without a language, some such words do not (the gap the setting closes)."""
    letters = LANGUAGES[code].letters
    word = data.draw(st.text(alphabet=letters, min_size=5, max_size=8))
    edited = _edited(word, data.draw(st.integers(0, 3)), data.draw(st.integers(0, 12)),
                     data.draw(st.sampled_from(letters)))
    if edited != word:
        assert word in edits1(edited, LANGUAGES[code].letters_for(edited))


@pytest.mark.parametrize("code", ["ru", "uk", "bg", "el", "he", "ar"])
def test_without_a_language_a_missing_letter_is_not_found(code):
    word = LANGUAGES[code].letters[:6]  # six letters, each once
    deleted = word[:2] + word[3:]
    assert word not in edits1(deleted, ASCII_LETTERS)
    assert word in edits1(deleted, LANGUAGES[code].letters_for(deleted))
