"""index_words / query_words / lookup_word against Plone's real splitter and normaliser."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from catalog_service.text import index_words, lookup_word, normalize_word, query_words
from catalog_service.text.pipeline import MAX_WORD
from tests.service.test_text_oracle import ALPHABET, plone_lexicon, real_index_words, texts


@given(texts)
@example("Égalité, fraternité! Straße ẞx ßx İstanbul")
@example("日本語のテキスト 한국어 ภาษาไทย Ελληνικά Москва")
@example("ｆｕｌｌ\u3000ｗｉｄｔｈ ﬁne ²³ Ⅻ ℃")
@example("aʔ Ɂ ǀfoo ǂbar Ʌ ª º µ")
def test_index_words_match_the_lexicon(text):
    assert index_words(text) == real_index_words(text)


@given(st.lists(texts, max_size=4))
def test_index_words_of_several_values(values):
    # ZCTextIndex passes all string values of an object to the lexicon as one list.
    assert index_words(values) == real_index_words(values)


@given(st.one_of(texts, st.text(alphabet=ALPHABET + "*?*?", max_size=20)))
@example("日本**")
@example("日*本")
@example("日本語*")
@example("*foo")
@example("foo*bar?baz")
@example('-"foo bar"')
def test_query_words_match_parse_terms(term):
    assert query_words(term) == plone_lexicon().parseTerms(term)


def _real_lookup(word):
    last = [word]
    for element in plone_lexicon()._pipeline:
        last = getattr(element, "process_post_glob", element.process)(last)
    [looked_up] = last
    return looked_up


@given(st.text(alphabet=ALPHABET + "*?", min_size=1, max_size=10).flatmap(
    lambda t: st.sampled_from(query_words(t) or ["x"])
))
@example("ßx")
@example("**")
@example("")
def test_lookup_word_matches_term_to_word_ids(word):
    try:
        expected = _real_lookup(word)
    except IndexError:
        with pytest.raises(ValueError):
            lookup_word(word)
    else:
        assert lookup_word(word) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Égalité Straße", ["egalite", "strasse"]),
        ("日本人", ["日本", "本人", "人"]),
        ("金", ["金"]),
        ("foo日本", ["foo", "日本", "本"]),
        ("日本한국", ["日本", "本", "한국", "국"]),
        ("Ελληνικά ΜΟΣΧΑ", ["ελληνικά", "μοσχα"]),
        ("1é _É", ["1é", "_e"]),
        ("d'été foo-bar foo_bar", ["d", "ete", "foo", "bar", "foo_bar"]),
        # Not Latin at the start: only lower-cased, so the capital sharp s stays a sharp s.
        ("ẞx", ["ßx"]),
        # Transliterations to punctuation and to nothing are stored as they come.
        ("aʔ Ɂ", ["a?", ""]),
        ("ｆｕｌｌ ﬁne", ["full", "fine"]),
        ("", []),
        ("... !!!", []),
    ],
)
def test_index_words_examples(text, words):
    assert index_words(text) == words == real_index_words(text)


@pytest.mark.parametrize(
    ("term", "words"),
    [
        ("foo*", ["foo*"]),
        ("日本*", ["日本"]),
        ("日本語", ["日本", "本語"]),
        ("日*", ["日*"]),
        ("日本**", ["日本", "本", "**"]),
        ("-foo-bar", ["foo", "bar"]),
        ('"Café au lait"', ["cafe", "au", "lait"]),
        ("*foo", ["foo"]),
    ],
)
def test_query_words_examples(term, words):
    assert query_words(term) == words == plone_lexicon().parseTerms(term)


def test_lookup_normalises_twice_like_zctextindex():
    # Indexed as "ßx" (not Latin at the start) but searched as "ssx".
    assert index_words("ẞx") == ["ßx"]
    assert query_words("ẞx") == ["ßx"]
    assert lookup_word("ßx") == "ssx" == _real_lookup("ßx")


def test_normalize_word_refuses_empty_word():
    with pytest.raises(ValueError):
        normalize_word("")


def test_bytes_are_refused():
    with pytest.raises(TypeError):
        index_words(b"foo")


def test_words_longer_than_the_lexicon_keeps_are_cut_alike():
    word = "ab" * 400  # 800 characters
    assert index_words(f"x {word} y") == ["x", word[:MAX_WORD], "y"]
    assert index_words(["x", word.upper()]) == ["x", word[:MAX_WORD]]
    assert query_words(word.upper()) == [word[:MAX_WORD]]
    assert lookup_word(word) == word[:MAX_WORD]
    assert query_words(word + "*") == [word + "*"]  # a glob keeps its pattern
    assert index_words("short words stay") == real_index_words("short words stay")
