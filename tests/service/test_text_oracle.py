"""The real Plone text pipeline and ZCTextIndex, as oracle for catalog_service.text, plus generators.

The oracle is built as Plone builds ``plone_lexicon`` (catalog.xml): the pipeline elements are
looked up by name in ZCTextIndex's element factory, where importing
Products.CMFPlone.UnicodeSplitter registers them; the indexes are real ZCTextIndex/OkapiIndex
objects inside a real ZCatalog, without a Plone site.
"""

from __future__ import annotations

import re

import Products.CMFPlone.UnicodeSplitter  # noqa: F401  (registers the pipeline elements)
from hypothesis import strategies as st
from Products.ZCatalog.ZCatalog import ZCatalog
from Products.ZCTextIndex import ParseTree
from Products.ZCTextIndex.Lexicon import Lexicon
from Products.ZCTextIndex.PipelineFactory import element_factory
from Products.ZCTextIndex.QueryParser import QueryParser
from Products.ZCTextIndex.ZCTextIndex import PLexicon, ZCTextIndex

from catalog_service.text import And, Atom, Glob, Not, Or, Phrase

PIPELINE = (
    ("Word Splitter", "Unicode Whitespace splitter"),
    ("Case Normalizer", "Unicode Ignoring Accents Case Normalizer"),
)
INDEX_ID = "SearchableText"


def plone_pipeline():
    return [element_factory.instantiate(group, name) for group, name in PIPELINE]


def plone_lexicon() -> Lexicon:
    return Lexicon(*plone_pipeline())


def real_index_words(text) -> list[str]:
    lexicon = plone_lexicon()
    return [lexicon.get_word(wid) for wid in lexicon.sourceToWordIds(text)]


class _Extra:
    doc_attr = INDEX_ID
    lexicon_id = "plone_lexicon"
    index_type = "Okapi BM25 Rank"


class _Doc:
    def __init__(self, text):
        if text is not None:
            self.SearchableText = text


class RealCatalog:
    """A ZCatalog with Plone's SearchableText index; documents are addressed by integer keys."""

    def __init__(self):
        self.catalog = ZCatalog("portal_catalog")
        self.catalog._setObject("plone_lexicon", PLexicon("plone_lexicon", "", *plone_pipeline()))
        self.catalog.addIndex(INDEX_ID, ZCTextIndex(INDEX_ID, extra=_Extra(), caller=self.catalog))
        self.index = self.catalog._catalog.getIndex(INDEX_ID)

    def path(self, key) -> str:
        return f"/plone/doc-{key}"

    def catalog_object(self, key, text):
        self.catalog.catalog_object(_Doc(text), uid=self.path(key))

    def uncatalog_object(self, key):
        self.catalog.uncatalog_object(self.path(key))

    def rid(self, key) -> int:
        return self.catalog._catalog.uids[self.path(key)]

    def words(self, key) -> list[str] | None:
        return self.index.getEntryForObject(self.rid(key))

    def indexed_words(self) -> dict[int, list[str]]:
        """key -> words, for every document in the text index (as the service would store them)."""
        rids = {rid: path for path, rid in self.catalog._catalog.uids.items()}
        result = {}
        for rid in self.index.index._docwords:
            key = int(rids[rid].rsplit("-", 1)[1])
            result[key] = self.index.getEntryForObject(rid)
        return result

    def scores(self, query: str) -> dict[int, int]:
        """key -> score of the index's own answer; raises what ZCTextIndex raises."""
        answer = self.index._apply_index({INDEX_ID: query})
        rids = {rid: path for path, rid in self.catalog._catalog.uids.items()}
        bucket = answer[0]
        return {int(rids[rid].rsplit("-", 1)[1]): score for rid, score in bucket.items()}

    def search_order(self, query: str) -> list[tuple[int, int]]:
        """(key, score) in ZCatalog's relevance order."""
        brains = self.catalog.searchResults({INDEX_ID: query})
        return [(int(b.getPath().rsplit("-", 1)[1]), b.data_record_score_) for b in brains]


def real_tree(query: str):
    """The real QueryParser's tree translated to our nodes, with words looked up as
    ZCTextIndex's search would (Lexicon.termToWordIds and globToWordIds)."""
    lexicon = plone_lexicon()
    return _translate(QueryParser(lexicon).parseQuery(query), lexicon)


def _lookup(lexicon, words):
    last = list(words)
    for element in lexicon._pipeline:
        last = getattr(element, "process_post_glob", element.process)(last)
    return last


def _translate(node, lexicon):
    kind = node.nodeType()
    value = node.getValue()
    if kind == "AND":
        return And(tuple(_translate(n, lexicon) for n in value))
    if kind == "OR":
        return Or(tuple(_translate(n, lexicon) for n in value))
    if kind == "NOT":
        return Not(_translate(value, lexicon))
    if kind == "ATOM":
        [word] = _lookup(lexicon, [value])
        return Atom(word)
    if kind == "PHRASE":
        return Phrase(tuple(_lookup(lexicon, value)))
    if kind == "GLOB":
        lexicon.globToWordIds(value)  # raises where ZCTextIndex's glob search raises
        return Glob(value)
    raise AssertionError(kind)


# What ZCTextIndex raises for a query it refuses: ParseError from the parser, QueryError for
# a glob starting with a wildcard, and (unintended, but it is what the catalog raises)
# IndexError for a word that normalises to nothing and re.error for a glob prefix that is not
# a valid regular expression.
REAL_QUERY_ERRORS = (ParseTree.ParseError, ParseTree.QueryError, IndexError, re.error)


# --- generators --------------------------------------------------------------------------------

LATIN = "aAbBcCdeEfghiIjklmnNoOpqrsStTuvwxyzZ"
ACCENTED = "éÉèàÀâäÄöÖüÜçÇñÑøØåÅæÆœŒßẞłŁıİðÐþÞÿőűčšžĳǅ"
GREEK = "αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΩάέήίόύώϊΐς"
CYRILLIC = "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЁЖЯ"
CJK = "日本語中文字人金山川東京大学"
KANA = "ひらがなカタカナーッゃ"
HANGUL = "한국어말글"
THAI = "ภาษาไทยกขคงั่ี้ๆ"
DIGITS = "0123456789٣۴०१²½Ⅻ"
# Letters whose transliteration is punctuation or nothing, the pipeline's odd corners.
ODD_LETTERS = "ʔɁǀǁǂɅˋª"
PUNCTUATION = "'’-‐_.,;:!?¿«»\"()[]/\\@#&%+*"
SPACES = "  \t\n\u3000\u00a0"
OTHERS = "😀🎉\u0301\u0308ＡＢｃ１ﬁﬀ№℃"
ALPHABET = LATIN + ACCENTED + GREEK + CYRILLIC + CJK + KANA + HANGUL + THAI + DIGITS + ODD_LETTERS + PUNCTUATION + SPACES + OTHERS

texts = st.one_of(
    st.text(alphabet=ALPHABET, max_size=60),
    st.text(max_size=30),
    st.lists(
        st.text(alphabet=LATIN + ACCENTED + GREEK + CJK + KANA + HANGUL + THAI, min_size=1, max_size=8),
        max_size=8,
    ).map(" ".join),
)

# Small vocabularies so that generated documents share words and queries hit them.
VOCABULARY = [
    "plone", "Plone", "PLÔNE", "zope", "café", "Cafe", "straße", "strasse", "naïve", "über",
    "ελληνικά", "Ελληνικά", "москва", "Москва", "日本語", "日本", "東京", "ひらがな", "한국어",
    "ภาษาไทย", "foo-bar", "foo_bar", "d'été", "l’été", "2024", "x1", "ẞx", "ßx", "aʔ",
]
documents = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=12).map(" ".join)
# Mostly plain documents; sometimes the values ZCTextIndex treats specially.
values = st.integers(0, 9).flatmap(
    lambda i: documents
    if i < 7
    else st.one_of(
        st.none(),
        st.just(""),
        st.lists(documents, max_size=3),
        st.lists(st.one_of(documents, st.none(), st.integers(), st.just("")), max_size=3),
        st.tuples(documents, documents),
        st.integers(),
        st.text(alphabet=ALPHABET, max_size=20),
    )
)

KEYWORDS = ["AND", "and", "And", "OR", "or", "oR", "NOT", "not", "Not"]
query_words_ = st.one_of(
    st.sampled_from(VOCABULARY),
    st.sampled_from(VOCABULARY).flatmap(lambda w: st.sampled_from([w[:1], w[:2], w[:3], w])).map(lambda w: w + "*"),
    st.sampled_from(["pl*", "Pl?ne", "caf?", "日*", "日本*", "東京*", "p*e", "ab*c?d", "x?", "*foo", "?", "a?"]),
    st.text(alphabet=ALPHABET, min_size=1, max_size=8),
)


@st.composite
def query_atoms(draw):
    kind = draw(st.sampled_from(["word", "word", "word", "phrase", "keyword", "paren", "neg"]))
    if kind == "word":
        return draw(query_words_)
    if kind == "phrase":
        words = draw(st.lists(query_words_, min_size=0, max_size=3))
        return '"' + " ".join(words).replace('"', "") + '"'
    if kind == "keyword":
        return draw(st.sampled_from(KEYWORDS))
    if kind == "paren":
        return draw(st.sampled_from(["(", ")"]))
    return "-" + draw(st.one_of(query_words_, st.just('"foo bar"')))


# Mostly well-formed queries, built from the grammar, to reach deep trees and every operator.
_leaf = st.one_of(
    query_words_,
    query_words_.map(lambda w: "-" + w),
    st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=3).map(lambda ws: '"' + " ".join(ws) + '"'),
    st.lists(query_words_, min_size=2, max_size=3).map(" ".join),
)
structured_queries = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(KEYWORDS[:6]), inner).map(" ".join),
        st.tuples(inner, st.sampled_from(["AND NOT", "and not"]), inner).map(" ".join),
        inner.map(lambda q: f"({q})"),
    ),
    max_leaves=6,
)

# Queries whose words come from VOCABULARY, so that they hit generated documents.
_hitting_word = st.one_of(
    st.sampled_from(VOCABULARY),
    st.sampled_from(VOCABULARY).flatmap(lambda w: st.integers(1, 4).map(lambda n: w[:n] + "*")),
)
_hitting_leaf = st.one_of(
    _hitting_word,
    _hitting_word,
    _hitting_word,
    _hitting_word,
    _hitting_word.map(lambda w: "-" + w),
    st.lists(st.sampled_from(VOCABULARY), min_size=2, max_size=3).map(lambda ws: '"' + " ".join(ws) + '"'),
    st.lists(_hitting_word, min_size=2, max_size=3).map(" ".join),
)
hitting_queries = st.recursive(
    _hitting_leaf,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["OR", "or", "AND", "and"]), inner).map(" ".join),
        st.tuples(inner, st.just("AND NOT"), inner).map(" ".join),
        inner.map(lambda q: f"({q})"),
    ),
    max_leaves=5,
)

queries = st.one_of(
    structured_queries,
    st.lists(query_atoms(), max_size=8).map(" ".join),
    st.lists(query_atoms(), max_size=6).map("".join),
    st.text(alphabet=ALPHABET + "()*?", max_size=30),
)


# --- the oracle's own set-up -------------------------------------------------------------------


def test_pipeline_is_plones():
    """The elements are the classes Plone's catalog.xml names, splitter first."""
    from Products.CMFPlone.UnicodeSplitter.splitter import I18NNormalizer, Splitter

    assert [type(e) for e in plone_pipeline()] == [Splitter, I18NNormalizer]


def test_real_catalog_scores_and_order():
    catalog = RealCatalog()
    catalog.catalog_object(1, "plone plone zope")
    catalog.catalog_object(2, "plone")
    catalog.catalog_object(3, "zope")
    scores = catalog.scores("plone")
    assert set(scores) == {1, 2} and all(s > 0 for s in scores.values())
    assert [key for key, _ in catalog.search_order("plone")] == sorted(scores, key=scores.get, reverse=True)
