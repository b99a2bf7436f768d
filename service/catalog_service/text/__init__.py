"""Full-text support compatible with Plone's ZCTextIndexes (lexicon ``plone_lexicon``, Okapi BM25).

Pure functions, no I/O and no Zope; Products.ZCTextIndex and
Products.CMFPlone.UnicodeSplitter are the specification, and the tests compare
with them.

Indexing: for each text index (``SearchableText``, ``Title``, ``Description``)
and each object, ``text_values(value)`` says what ZCTextIndex indexes; when
it is not None, store ``index_words(...)`` of it: the ordered words,
duplicates kept. When it is None the object is not indexed, and if it was
indexed before, ZCTextIndex keeps its old words. A document with no words
still counts for scoring.

Searching: ``parse_query(text)`` gives a tree of :class:`And`, :class:`Or`,
:class:`Not` (only inside And), :class:`Atom` (one word), :class:`Phrase`
(consecutive words) and :class:`Glob` (words matching a pattern, at least one
literal prefix character), or raises :class:`TextQueryError` (a 400
``QueryError``) where ZCTextIndex raises. The words in the tree are already
in stored form: compare them with the stored words for equality. Only an
exactly empty query string is skipped by ZCatalog (no restriction) instead of
refused; check for it before parsing.

Ranking: ``okapi_scores(tree, docs)`` is the reference; its module docstring
(:mod:`catalog_service.text.okapi`) gives the formula in terms SQL can
compute (N, document length, mean length, per-word document frequency).
"""

from catalog_service.text.okapi import okapi_scores, word_score
from catalog_service.text.pipeline import index_words, lookup_word, normalize_word, query_words, text_values
from catalog_service.text.query import And, Atom, Glob, Node, Not, Or, Phrase, TextQueryError, parse_query

__all__ = [
    "And",
    "Atom",
    "Glob",
    "Node",
    "Not",
    "Or",
    "Phrase",
    "TextQueryError",
    "index_words",
    "lookup_word",
    "normalize_word",
    "okapi_scores",
    "parse_query",
    "query_words",
    "text_values",
    "word_score",
]
