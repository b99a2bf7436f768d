"""parse_query against ZCTextIndex's QueryParser (structure, lookup words and errors)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from catalog_service.errors import QueryError
from catalog_service.text import And, Atom, Glob, Not, Or, Phrase, TextQueryError, parse_query
from tests.service.test_text_oracle import REAL_QUERY_ERRORS, queries, real_tree

EXAMPLES = [
    "foo", "foo bar", "foo OR bar", "foo AND bar", "foo AND NOT bar", "foo -bar", "-bar foo",
    "foo and not bar", "(foo OR bar) AND baz", '"foo bar" baz', "foo-bar", "-foo-bar baz",
    "foo*", "日本*", "日*", "foo NOT bar", "NOT foo", "-foo", "-foo -bar", "foo AND -bar",
    "", " ", "()", "(foo", "foo)", "foo AND", "OR foo", "foo (bar)", "(foo) bar", "...",
    "foo ...", "... AND NOT foo", "foo OR (... AND NOT bar)", '"', 'foo "bar', '"AND"', "-and",
    "Ɂ", "Ɂ*", "ǀfoo*", "(ǀ*", "aʔ", '"日本**"', "*foo", "?", "ab*c?d", "a AND NOT (b OR c)",
    "foo\u3000bar", "ẞx", "Café OR über",
]


def _outcome(parse, query):
    try:
        return parse(query)
    except TextQueryError as exc:
        return ("error", type(exc).__name__)
    except REAL_QUERY_ERRORS as exc:
        return ("error", type(exc).__name__)


def _assert_same(query):
    expected = _outcome(real_tree, query)
    got = _outcome(parse_query, query)
    if isinstance(expected, tuple):
        assert isinstance(got, tuple), f"{query!r}: ZCTextIndex raises {expected[1]}, we parse {got!r}"
    else:
        assert got == expected, query


@pytest.mark.parametrize("query", EXAMPLES)
def test_examples_agree_with_query_parser(query):
    _assert_same(query)


@given(queries)
@example("foo AND NOT bar OR baz")
@example("((a))")
def test_generated_queries_agree_with_query_parser(query):
    _assert_same(query)


@pytest.mark.parametrize(
    ("query", "tree"),
    [
        ("foo bar", And((Atom("foo"), Atom("bar")))),
        ("-bar foo", And((Atom("foo"), Not(Atom("bar"))))),
        ("Foo AND NOT bar OR baz", Or((And((Atom("foo"), Not(Atom("bar")))), Atom("baz")))),
        ('"Café au" lait*', And((Phrase(("cafe", "au")), Glob("lait*")))),
        ("foo-bar", Phrase(("foo", "bar"))),
        ("日本語", Phrase(("日本", "本語"))),
        ("日本*", Atom("日本")),
        ("foo ... OR (... AND NOT bar)", Atom("foo")),
        ("ẞx", Atom("ssx")),
        ("a b AND c", And((And((Atom("a"), Atom("b"))), Atom("c")))),
    ],
)
def test_trees(query, tree):
    assert parse_query(query) == tree


@pytest.mark.parametrize(
    "query",
    ["", "   ", "foo NOT bar", "NOT foo", "-foo", "foo AND -bar", "(foo", "()", "...", "Ɂ", "Ɂ*", "(ǀ*"],
)
def test_refused_queries(query):
    with pytest.raises(TextQueryError) as info:
        parse_query(query)
    assert isinstance(info.value, QueryError) and isinstance(info.value, ValueError)
    assert info.value.status == 400 and str(info.value)


def test_non_string_query():
    with pytest.raises(TextQueryError):
        parse_query(None)


def test_glob_helpers():
    glob = Glob("ab*c?d")
    assert glob.prefix == "ab"
    assert glob.matches("abXXcYd") and glob.matches("abcYd") and not glob.matches("abcd")
    assert glob.like_pattern == "ab%c_d"
    assert Glob("a_b%*").like_pattern == "a\\_b\\%%"
    # A prefix with regular-expression syntax (from a transliteration) is used as a regex by
    # ZCTextIndex: no LIKE equivalent.
    assert Glob("|foo*").like_pattern is None
    assert Glob("|foo*").matches("|foobar")


def test_deep_nesting_is_a_query_error():
    query = "(" * 5000 + "foo" + ")" * 5000
    with pytest.raises(RecursionError):
        real_tree(query)
    with pytest.raises(TextQueryError):
        parse_query(query)


@settings(max_examples=500)
@given(st.text("ab", min_size=1, max_size=2), st.text("ab?*", max_size=8), st.text("ab", max_size=10))
def test_glob_matching_is_zctextindex_s_regex_without_its_backtracking(prefix, rest, word):
    """Glob.matches answers as the regex ZCTextIndex's glob expansion compiles (the oracle here),
    by a matcher whose work is bounded by the word's length squared: the regex of a public glob
    with many stars (``a*?*?*?...``) backtracked for minutes on one long word of a highlighted page."""
    from catalog_service.text.query import _glob_regex

    glob = Glob(prefix + rest)
    assert glob.matches(word) == (word.startswith(glob.prefix) and _glob_regex(glob.pattern).match(word) is not None)


def test_a_glob_of_many_stars_against_a_long_word_is_answered():
    # 1.6 s with the regex at 12 stars and a 30-letter word; each further star multiplied it.
    assert not Glob("a" + "*?" * 40 + "*9").matches("a" * 200)
    assert Glob("a" + "*?" * 40 + "*9").matches("a" * 200 + "9")
