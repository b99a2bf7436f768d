"""Okapi BM25 relevance, computed as ZCTextIndex's OkapiIndex computes it.

Inputs, per text index (``SearchableText``, ``Title``, ...):

- ``N``: the number of documents in the index. A document counts when its
  indexed value is a string (or a list of strings), even one with no words
  (``""``, ``"..."``); an object whose value is None or not a string is not in
  the index and does not count.
- ``len(D)``: the number of words of document ``D``, ``len(index_words(text))``.
- ``mean``: ``sum(len(D)) / N`` over the same documents.
- ``df(t)``: the number of documents containing lexicon word ``t``.
- ``f(D, t)``: how often ``t`` occurs in ``D``.

The score of one word in one document is an integer (all float arithmetic in
IEEE double, in this order)::

    idf   = ln(1.0 + N / df(t)) * 1024.0
    K     = 0.25 + 0.75 * len(D) / mean           -- (0.75 * len(D)) / mean
    tf    = f(D, t) * 2.2 / (f(D, t) + 1.2 * K)    -- k1 = 1.2, b = 0.75
    score = floor(tf * idf + 0.5)

The same in SQL (``double precision`` throughout; ``$mean`` computed as
``sum(len)::float8 / count(*)``), which the tests check against
:func:`word_score` on PostgreSQL::

    floor(($f * 2.2 / ($f + 1.2 * (0.25 + 0.75 * $len / $mean)))
          * (ln(1.0 + $n::float8 / $df) * 1024.0) + 0.5)::int

Combining, all with integer addition and every weight 1:

- :class:`Atom`: the word's score; documents without the word are not hits.
- :class:`Glob`: the sum of the scores of every distinct indexed word the glob
  matches.
- :class:`Phrase`: documents containing the words consecutively score the sum
  of each word's score, a repeated word counted each time it is repeated; if
  any word is in no document, nothing matches.
- :class:`And`: documents that are hits of every positive child score the sum
  of those children's scores; documents that are hits of any :class:`Not`
  child are removed (a Not adds nothing to the score).
- :class:`Or`: documents that are hits of any child score the sum of the
  scores of the children they hit.

In the catalog (Products.ZCatalog ``Catalog.search``), without ``sort_on``,
results are ordered by this score, highest first; ties fall to the higher
record id. Results of other indexes in the same query are intersected with a
weighted intersection that adds 1 to every score per set-valued index (the
same constant for every hit, so the order does not change), and two text
indexes in one query add their scores.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from catalog_service.text.query import And, Atom, Glob, Node, Not, Or, Phrase

__all__ = ["K1", "B", "okapi_scores", "word_score"]

K1 = 1.2
B = 0.75
_K1_PLUS_1 = K1 + 1.0
_ONE_MINUS_B = 1.0 - B

DocId = TypeVar("DocId", bound=Hashable)


def word_score(frequency: int, doc_length: int, doc_frequency: int, doc_count: int, mean_length: float) -> int:
    """The integer score of one word in one document (see the module docstring)."""
    idf = math.log(1.0 + float(doc_count) / doc_frequency) * 1024.0
    length_weight = _ONE_MINUS_B + B * doc_length / mean_length
    tf = frequency * _K1_PLUS_1 / (frequency + K1 * length_weight)
    return int(tf * idf + 0.5)


class _Corpus:
    def __init__(self, docs: Mapping[DocId, Sequence[str]]):
        self.docs = docs
        self.doc_count = len(docs)
        total = sum(len(words) for words in docs.values())
        self.mean_length = total / float(self.doc_count) if self.doc_count else 0.0
        self.postings: dict[str, dict[DocId, int]] = {}
        for docid, words in docs.items():
            for word, count in Counter(words).items():
                self.postings.setdefault(word, {})[docid] = count

    def word_hits(self, word: str) -> dict[DocId, int]:
        postings = self.postings.get(word, {})
        return {
            docid: word_score(count, len(self.docs[docid]), len(postings), self.doc_count, self.mean_length)
            for docid, count in postings.items()
        }


def _add(into: dict, hits: Mapping) -> None:
    for docid, score in hits.items():
        into[docid] = into.get(docid, 0) + score


def _intersect(parts: list[dict]) -> dict:
    if not parts:
        return {}
    common = set(parts[0]).intersection(*parts[1:])
    return {docid: sum(p[docid] for p in parts) for docid in common}


def _contains_run(words: Sequence[str], run: Sequence[str]) -> bool:
    n = len(run)
    return any(list(words[i : i + n]) == list(run) for i in range(len(words) - n + 1))


def _evaluate(node: Node, corpus: _Corpus) -> dict:
    match node:
        case Atom(word):
            return corpus.word_hits(word)
        case Glob():
            hits: dict = {}
            for word in corpus.postings:
                if node.matches(word):
                    _add(hits, corpus.word_hits(word))
            return hits
        case Phrase(words):
            if any(w not in corpus.postings for w in words):
                return {}
            common = _intersect([corpus.word_hits(w) for w in words])
            return {d: s for d, s in common.items() if _contains_run(corpus.docs[d], words)}
        case And(children):
            positives = [_evaluate(c, corpus) for c in children if not isinstance(c, Not)]
            excluded: set = set()
            for child in children:
                if isinstance(child, Not):
                    excluded.update(_evaluate(child.child, corpus))
            return {d: s for d, s in _intersect(positives).items() if d not in excluded}
        case Or(children):
            hits = {}
            for child in children:
                _add(hits, _evaluate(child, corpus))
            return hits
        case Not():
            raise ValueError("a Not node can only be evaluated as a child of And")
    raise TypeError(f"not a text query node: {node!r}")


def okapi_scores(tree: Node, docs: Mapping[DocId, Sequence[str]]) -> dict[DocId, int]:
    """The hits of ``tree`` among ``docs`` (docid -> ``index_words``) with their Okapi scores.

    A pure reference for the SQL translation: ``docs`` must hold every
    document of the index, including those with no words, as they all count
    in ``N`` and the mean length.
    """
    return _evaluate(tree, _Corpus(docs))
