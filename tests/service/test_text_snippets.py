"""The snippet builder of highlighting (catalog_service.text.snippets): escaping, <script> in
content, bounded work on long texts, unicode and accents; and the pure parts of typo tolerance
(catalog_service.text.typos): budgets, distances, corrected queries that parse back."""

from __future__ import annotations

import html
import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog_service.text import Atom, Or, index_words, parse_query, typos
from catalog_service.text.snippets import ELLIPSIS, QueryTerms, mark_text, mark_words, terms_of
from catalog_service.text.typos import corrected, edit_distance, positive_atoms, query_text

MARKED = re.compile(r"<mark>(.*?)</mark>")


def terms(query: str) -> QueryTerms:
    return terms_of(parse_query(query))


def unmarked(snippet: str) -> str:
    """The snippet's text as a browser shows it (marks removed, entities decoded)."""
    return html.unescape(snippet.replace("<mark>", "").replace("</mark>", "").replace(ELLIPSIS, ""))


# -- terms ---------------------------------------------------------------------------------------


def test_terms_are_the_positive_words_and_globs():
    found = terms('garden AND "old bridge" AND NOT river OR muse*')
    assert found.words == {"garden", "old", "bridge"}
    assert found.matches("museum") and not found.matches("river") and not found.matches("mus")


# -- escaping ------------------------------------------------------------------------------------


def test_script_in_content_is_escaped_and_only_marks_are_tags():
    text = 'Garden <script>alert("garden")</script> & <b onclick=x>garden</b>'
    snippet = mark_text(text, terms("garden"))
    assert "<script" not in snippet and "<b" not in snippet
    assert set(re.findall(r"</?[a-z]+", snippet)) == {"<mark", "</mark"}
    assert "&lt;script&gt;alert(&quot;<mark>garden</mark>&quot;)&lt;/script&gt;" in snippet
    assert unmarked(snippet) == text
    assert MARKED.findall(snippet) == ["Garden", "garden", "garden"]


def test_a_matched_word_that_is_markup_is_escaped_inside_the_mark():
    words = ["<script>", "garden", "&amp;"]
    snippet = mark_words(words, QueryTerms(frozenset({"garden", "<script>"})))
    assert snippet == "<mark>&lt;script&gt;</mark> <mark>garden</mark> &amp;amp;"


@given(st.text(max_size=300), st.sampled_from(["script", "garden", "a", "amp", "lt"]))
def test_any_text_gives_a_safe_snippet_of_itself(text, word):
    snippet = mark_text(text, terms(word), size=10_000)
    if snippet is None:
        assert word not in [w for run in re.findall(r"\w+", text) for w in index_words(run)]
        return
    assert "<" not in MARKED.sub("", snippet) and ">" not in MARKED.sub("", snippet)
    assert unmarked(snippet) == text
    for marked in MARKED.findall(snippet):
        assert word in index_words(html.unescape(marked))


# -- unicode and accents --------------------------------------------------------------------------


def test_accented_words_are_marked_for_their_folded_query():
    snippet = mark_text("Liberté, Égalité, Fraternité", terms("egalite"))
    assert snippet == "Liberté, <mark>Égalité</mark>, Fraternité"
    assert mark_text("Die Straße am Fluss", terms("strasse")) == "Die <mark>Straße</mark> am Fluss"
    assert mark_text("ΕΛΛΗΝΙΚΆ κείμενα", terms("ελληνικά")) == "<mark>ΕΛΛΗΝΙΚΆ</mark> κείμενα"


def test_cjk_runs_are_marked_when_a_bigram_matches():
    assert mark_text("東京 日本人 大阪", terms("日本")) == "東京 <mark>日本人</mark> 大阪"


# -- long texts ----------------------------------------------------------------------------------


def test_a_long_text_gives_a_window_around_the_first_match():
    text = " ".join(["filler"] * 2000 + ["museum"] + ["after"] * 5000)  # the match within SCAN_CHARS
    snippet = mark_text(text, terms("museum"))
    assert snippet.startswith(ELLIPSIS) and snippet.endswith(ELLIPSIS)
    assert "<mark>museum</mark>" in snippet
    assert len(unmarked(snippet)) <= 240
    assert unmarked(snippet).strip() in text  # cut at word boundaries, not inside a word
    assert all(w in ("filler", "after", "museum") for w in unmarked(snippet).split())


def test_a_match_past_the_scanned_part_gives_no_snippet_and_the_work_is_bounded():
    text = "word " * 2_000_000 + "museum"
    started = time.perf_counter()
    assert mark_text(text, terms("museum")) is None
    words = ["word"] * 2_000_000 + ["museum"]
    assert mark_words(words, terms("museum")) is None
    assert time.perf_counter() - started < 1.0  # 10 MB of text: only the scanned start is read


def test_word_sequence_window_and_ellipses():
    words = [f"w{i}" for i in range(100)]
    words[50] = "garden"
    snippet = mark_words(words, terms("garden"))
    shown = snippet.split(" ")
    assert shown[0] == ELLIPSIS and shown[-1] == ELLIPSIS
    assert len(shown) == 30 + 2 and "<mark>garden</mark>" in shown
    assert mark_words(["garden", "x"], terms("garden")) == "<mark>garden</mark> x"
    assert mark_words(["x"], terms("garden")) is None


def test_no_terms_no_snippet():
    assert mark_text("garden", QueryTerms(frozenset())) is None
    assert mark_words(["garden"], QueryTerms(frozenset())) is None


# -- typo tolerance, pure parts ------------------------------------------------------------------


def test_edit_budget_by_length():
    assert [typos.edit_budget("x" * n) for n in (1, 4, 5, 8, 9, 20, 40, 41, 255)] == [0, 0, 1, 1, 2, 2, 2, 0, 0]


def _levenshtein_with_swaps(a: str, b: str) -> int:
    """The optimal string alignment distance, written as the textbook recursion."""
    from functools import lru_cache

    @lru_cache(None)
    def d(i: int, j: int) -> int:
        if not i or not j:
            return i or j
        best = min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))
        if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
            best = min(best, d(i - 2, j - 2) + 1)
        return best

    return d(len(a), len(b))


@given(st.text("abcde", max_size=7), st.text("abcde", max_size=7), st.integers(0, 3))
def test_edit_distance_is_the_optimal_string_alignment(a, b, limit):
    exact = _levenshtein_with_swaps(a, b)
    assert edit_distance(a, b) == exact
    assert edit_distance(a, b, limit) == exact if exact <= limit else edit_distance(a, b, limit) > limit


def test_a_transposition_is_one_edit():
    assert edit_distance("muesum", "museum") == 1
    assert "museum" in typos.edits1("muesum")
    assert all(edit_distance("garden", w) == 1 for w in typos.edits1("garden"))


def test_corrected_query_parses_back_and_keeps_not_parts():
    tree = parse_query("garden AND muesum AND NOT muesum")
    assert positive_atoms(tree) == ["garden", "muesum"]
    fixed = corrected(tree, {"muesum": ["museum", "museums"]})
    assert parse_query(query_text(fixed)) == fixed
    assert fixed.children[1] == Or((Atom("museum"), Atom("museums")))
    assert corrected(tree, {"muesum": ["museum"]}).children[1] == Atom("museum")
    globbed = parse_query("garden muesum* mu*e?")
    assert positive_atoms(globbed) == ["garden", "muesum"]
    assert query_text(corrected(globbed, {"muesum": ["museum", "museums"]})) == '("garden") AND (museum*) AND (mu*e?)'
    assert fixed.children[2] == tree.children[2]


@given(st.lists(st.sampled_from(["garden", "and", "or", "not", '"old bridge"', "mus*", "-river", "(x OR y)",
                                 "café", "日本"]), min_size=1, max_size=5), st.sampled_from([" ", " AND ", " OR "]))
def test_query_text_round_trips(parts, joiner):
    try:
        tree = parse_query(joiner.join(parts))
    except ValueError:
        return
    assert parse_query(query_text(tree)) == tree


def test_did_you_mean_keeps_the_callers_writing():
    assert typos.did_you_mean("Garden AND Muesum!", {"muesum": "museum"}) == "Garden AND museum!"
    assert typos.round_trips("museum") and not typos.round_trips("a?b")


@pytest.mark.parametrize("word", ["and", "not", "or"])
def test_keywords_as_words_round_trip(word):
    assert typos.round_trips(word)
