"""The SQL forms documented for text queries, checked on a real PostgreSQL.

Glob.like_pattern is meant to select exactly the lexicon words Glob.matches (ZCTextIndex's glob
expansion) selects, and Glob.prefix with starts_with() the candidates of the others.
"""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog_service.text import Glob, TextQueryError, index_words, parse_query, word_score
from tests.service.test_text_oracle import ALPHABET, VOCABULARY, texts


@pytest.fixture(scope="module")
def connection(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


def _globs(node):
    if isinstance(node, Glob):
        yield node
    for child in getattr(node, "children", ()):
        yield from _globs(child)
    if hasattr(node, "child"):
        yield from _globs(node.child)


glob_terms = st.one_of(
    st.sampled_from(VOCABULARY).flatmap(lambda w: st.integers(1, 5).map(lambda n: w[:n] + "*")),
    st.text(alphabet=ALPHABET + "*?%_\\" * 4, min_size=1, max_size=8),
    st.sampled_from(["a_b*", "a%*", "a\\*", "ab?", "x*y?z", "ǀfoo*", "aʔ*", "ǃ*"]),
)


@settings(max_examples=100)
@given(st.lists(glob_terms, min_size=1, max_size=5), st.lists(texts, min_size=1, max_size=5))
def test_like_pattern_selects_what_matches_selects(connection, terms, documents):
    words = sorted({w for text in documents for w in index_words(text)} | {"a_b", "a%", "a\\", "abc"})
    globs = []
    for term in terms:
        try:
            globs.extend(_globs(parse_query(term)))
        except TextQueryError:
            continue
    for glob in globs:
        expected = [w for w in words if glob.matches(w)]
        candidates = connection.execute(
            "select w from unnest(%s::text[]) as t(w) where starts_with(w, %s) order by w collate \"C\"",
            (words, glob.prefix),
        ).fetchall()
        assert expected == [w for (w,) in candidates if glob.matches(w)]
        if glob.like_pattern is not None:
            selected = connection.execute(
                "select w from unnest(%s::text[]) as t(w) where w like %s order by w collate \"C\"",
                (words, glob.like_pattern),
            ).fetchall()
            assert [w for (w,) in selected] == expected, glob


def test_like_pattern_escapes_wildcards(connection):
    glob = Glob("a_b%*\\")
    assert glob.like_pattern == "a\\_b\\%%\\\\"
    words = ["a_b%\\", "a_b%x\\", "axb%\\", "a_b%x", "a_b\\", "a_b%\u00e9\\"]
    rows = connection.execute("select w from unnest(%s::text[]) as t(w) where w like %s", (words, glob.like_pattern))
    assert sorted(w for (w,) in rows) == sorted(w for w in words if glob.matches(w)) == ["a_b%\\", "a_b%x\\", "a_b%\u00e9\\"]
    # A backslash in the prefix is regex syntax to ZCTextIndex: no LIKE form.
    assert Glob("a\\b*").like_pattern is None


SQL_WORD_SCORE = """
select floor((%(f)s::float8 * 2.2 / (%(f)s + 1.2 * (0.25 + 0.75 * %(len)s::float8 / %(mean)s::float8)))
             * (ln(1.0 + %(n)s::float8 / %(df)s) * 1024.0) + 0.5)::int
"""


@st.composite
def word_statistics(draw):
    n = draw(st.integers(1, 2_000_000))
    df = draw(st.integers(1, n))
    length = draw(st.integers(1, 100_000))
    frequency = draw(st.integers(1, length))
    total = length + draw(st.integers(0, 50_000_000))
    return {"f": frequency, "len": length, "df": df, "n": n, "mean": total / float(n)}


@settings(max_examples=300)
@given(word_statistics())
def test_sql_word_score_equals_reference(connection, stats):
    [(sql_score,)] = connection.execute(SQL_WORD_SCORE, stats).fetchall()
    assert sql_score == word_score(stats["f"], stats["len"], stats["df"], stats["n"], stats["mean"])
