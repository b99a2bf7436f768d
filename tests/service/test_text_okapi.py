"""okapi_scores against a real ZCTextIndex (OkapiIndex) in a ZCatalog, on generated corpora."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog_service.text import (
    And,
    Atom,
    Glob,
    Not,
    Or,
    Phrase,
    TextQueryError,
    index_words,
    okapi_scores,
    parse_query,
    text_values,
    word_score,
)
from tests.service.test_text_oracle import (
    REAL_QUERY_ERRORS,
    VOCABULARY,
    RealCatalog,
    hitting_queries,
    queries,
    structured_queries,
    values,
)

corpora = st.dictionaries(st.integers(1, 40), values, min_size=1, max_size=12)
# Later changes: catalog the object again with a new value, or uncatalog it.
changes = st.lists(st.tuples(st.integers(1, 40), st.sampled_from(["catalog", "uncatalog"]), values), max_size=6)


def _build(corpus, later):
    catalog = RealCatalog()
    current = {}
    for key, value in corpus.items():
        catalog.catalog_object(key, value)
        current[key] = value
    for key, action, value in later:
        if action == "uncatalog":
            if key in current:
                catalog.uncatalog_object(key)
                del current[key]
            continue
        catalog.catalog_object(key, value)
        # A value that is not text leaves an earlier text entry in place (ZCTextIndex.index_object
        # returns without unindexing), so the service must keep the old words too.
        if text_values(value) is not None or key not in current:
            current[key] = value
    # The service's view: the words of every object whose current value is indexed.
    docs = {key: index_words(text_values(value)) for key, value in current.items() if text_values(value) is not None}
    return catalog, docs


def _assert_scores_agree(catalog, docs, query):
    try:
        expected = catalog.scores(query)
    except REAL_QUERY_ERRORS:
        with pytest.raises(TextQueryError):
            parse_query(query)
        return
    assert okapi_scores(parse_query(query), docs) == expected, query


@settings(max_examples=300)
@given(corpora, st.lists(st.one_of(hitting_queries, hitting_queries, structured_queries, queries), min_size=1, max_size=4))
def test_scores_match_okapi_index(corpus, query_list):
    catalog, docs = _build(corpus, [])
    assert docs == catalog.indexed_words()
    for query in query_list:
        if query == "":
            continue  # the index skips an empty query; see test_empty_query_is_skipped_by_the_index
        _assert_scores_agree(catalog, docs, query)


@settings(max_examples=60)
@given(corpora, changes, st.lists(hitting_queries, min_size=1, max_size=3))
def test_scores_after_reindex_and_uncatalog(corpus, later, query_list):
    catalog, docs = _build(corpus, later)
    assert docs == catalog.indexed_words()
    for query in query_list:
        _assert_scores_agree(catalog, docs, query)


@settings(max_examples=60)
@given(corpora, hitting_queries)
def test_catalog_orders_by_score_then_record_id(corpus, query):
    catalog, docs = _build(corpus, [])
    try:
        tree = parse_query(query)
    except TextQueryError:
        return
    scores = okapi_scores(tree, docs)
    expected = sorted(scores.items(), key=lambda item: (item[1], catalog.rid(item[0])), reverse=True)
    assert catalog.search_order(query) == expected


def test_value_that_is_not_text_keeps_the_old_entry():
    catalog = RealCatalog()
    catalog.catalog_object(1, "plone zope")
    catalog.catalog_object(1, None)
    assert catalog.indexed_words() == {1: index_words("plone zope")}
    catalog.catalog_object(1, "")
    assert catalog.indexed_words() == {1: []}


def test_empty_query_is_skipped_by_the_index():
    catalog = RealCatalog()
    catalog.catalog_object(1, "plone")
    assert catalog.index._apply_index({"SearchableText": ""})[0] is None
    with pytest.raises(TextQueryError):
        parse_query("")


def test_word_score_formula():
    # One document of 3 words among 2 documents of mean length 2, word seen twice, in 1 document.
    idf = math.log(1.0 + 2 / 1) * 1024.0
    tf = 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 3 / 2.0))
    assert word_score(2, 3, 1, 2, 2.0) == int(tf * idf + 0.5)


def test_fixed_corpus():
    catalog = RealCatalog()
    texts = {
        1: "Plone plone Zope",
        2: "plone café",
        3: "Café au lait, Cafe noir",
        4: "日本語 東京",
        5: "",
        6: ["foo bar", "bar foo foo"],
    }
    for key, text in texts.items():
        catalog.catalog_object(key, text)
    docs = {key: index_words(text) for key, text in texts.items()}
    for query in [
        "plone", "cafe", "café OR zope", "plone AND NOT zope", "caf*", "\"foo bar\"", "\"bar foo\"",
        "\"foo foo\"", "日本", "日本語", "日*", "plone -zope", "(plone OR cafe) AND NOT lait", "nothing",
        "\"plone nothing\"", "foo* bar*", "pl?ne",
    ]:
        assert okapi_scores(parse_query(query), docs) == catalog.scores(query), query


def test_tree_shapes_score_as_documented():
    docs = {1: ["a", "b", "a"], 2: ["b", "c"], 3: ["c"], 4: []}
    a, b, c = (okapi_scores(Atom(w), docs) for w in "abc")
    assert okapi_scores(Or((Atom("a"), Atom("b"))), docs) == {1: a[1] + b[1], 2: b[2]}
    assert okapi_scores(And((Atom("b"), Not(Atom("a")))), docs) == {2: b[2]}
    assert okapi_scores(Glob("?"), docs) == {1: a[1] + b[1], 2: b[2] + c[2], 3: c[3]}
    assert okapi_scores(Phrase(("a", "b")), docs) == {1: a[1] + b[1]}
    assert okapi_scores(Phrase(("b", "a", "x")), docs) == {}
    with pytest.raises(ValueError):
        okapi_scores(Not(Atom("a")), docs)


def test_vocabulary_is_shared_enough():
    # The generated corpora draw from VOCABULARY; make sure it still produces overlapping words.
    words = [w for text in VOCABULARY for w in index_words(text)]
    assert len(words) > len(set(words))
