"""Snippets of a text with the words a text query matched wrapped in ``<mark>``, HTML-safe.

Pure functions, no I/O. Two sources of text:

- **Original text** (a metadata column such as ``Title`` or ``Description``): the text as the
  object gave it. Each run of word characters is split and folded with Plone's lexicon pipeline
  (:func:`~catalog_service.text.pipeline.index_words`); a run is marked when one of its words
  is one the query matched, so ``Égalité`` is marked for the query ``egalite``. A CJK, Hangul
  or Thai run is marked as a whole when one of its bigrams matched.
- **A stored word sequence** (a text index such as ``SearchableText``, whose source text the
  catalog does not keep): the words as the lexicon stores them (folded: lower case, accents
  transliterated), joined by spaces. The snippet is a window of words around the first match.

Safety: every piece of text is HTML-escaped (``&``, ``<``, ``>``, ``"``, ``'``) before the marks are
put around it, so a ``<script>`` in the content comes out as ``&lt;script&gt;`` and the only tags
in a snippet are ``<mark>`` and ``</mark>``.

Cost: bounded per snippet whatever the text's length. At most ``scan`` characters (original
text) or words (a word sequence) are looked at from the start; a first match beyond them gives
no snippet. The snippet itself is at most ``size`` characters or words of the source (plus the
escaping, the marks and an ellipsis at each cut end).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .pipeline import index_words
from .query import And, Atom, Glob, Node, Not, Or, Phrase

__all__ = ["ELLIPSIS", "MARK", "QueryTerms", "mark_text", "mark_words", "terms_of"]

MARK = ("<mark>", "</mark>")
ELLIPSIS = "…"
SCAN_CHARS = 20_000
SNIPPET_CHARS = 240
SCAN_WORDS = 5_000
SNIPPET_WORDS = 30

_RUN = re.compile(r"\w+")


@dataclass(frozen=True)
class QueryTerms:
    """The words a text query searches for (its atoms and phrase words) and its globs; the words
    of its ``NOT`` parts are not among them (they match nothing the answer holds)."""

    words: frozenset[str]
    globs: tuple[Glob, ...] = ()

    def matches(self, word: str) -> bool:
        return word in self.words or any(g.matches(word) for g in self.globs)

    def __bool__(self) -> bool:
        return bool(self.words or self.globs)

    def __or__(self, other: QueryTerms) -> QueryTerms:
        return QueryTerms(self.words | other.words, tuple(dict.fromkeys(self.globs + other.globs)))


def terms_of(node: Node | None) -> QueryTerms:
    """The positive words and globs of a parsed text query (:func:`~catalog_service.text.parse_query`)."""
    words: set[str] = set()
    globs: list[Glob] = []

    def walk(n: Node) -> None:
        match n:
            case Atom(word):
                words.add(word)
            case Phrase(phrase):
                words.update(phrase)
            case Glob():
                globs.append(n)
            case And(children) | Or(children):
                for child in children:
                    if not isinstance(child, Not):
                        walk(child)

    if node is not None:
        walk(node)
    return QueryTerms(frozenset(words), tuple(dict.fromkeys(globs)))


def _marked(piece: str) -> str:
    return MARK[0] + html.escape(piece) + MARK[1]


def mark_text(text: str, terms: QueryTerms, size: int = SNIPPET_CHARS, scan: int = SCAN_CHARS) -> str | None:
    """The HTML snippet of an original text around its first matched word, or None when none of
    its first ``scan`` characters is a matched word. A text of at most ``size`` characters is
    shown whole; a longer one as a window of about ``size`` characters, cut at word boundaries,
    starting a little before the first match."""
    if not terms or not text:
        return None
    scanned = text[:scan]
    matched = [m.span() for m in _RUN.finditer(scanned) if any(map(terms.matches, index_words(m.group())))]
    if not matched:
        return None
    start, end = 0, len(text)
    if len(text) > size:
        start = _word_start(text, max(0, matched[0][0] - size // 4))
        end = _word_end(text, min(len(text), start + size), floor=matched[0][1])
    parts = [ELLIPSIS] if start > 0 else []
    position = start
    for first, last in matched:
        if first < start:
            continue
        if last > end:
            break
        parts += [html.escape(text[position:first]), _marked(text[first:last])]
        position = last
    parts.append(html.escape(text[position:end]))
    if end < len(text):
        parts.append(ELLIPSIS)
    return "".join(parts)


def _word_start(text: str, at: int) -> int:
    """``at`` moved back to the start of the word it falls in."""
    while 0 < at < len(text) and _is_word(text[at - 1]) and _is_word(text[at]):
        at -= 1
    return at


def _word_end(text: str, at: int, floor: int) -> int:
    """``at`` moved back to the end of the word it falls in, but not before ``floor`` (the end
    of the first match, which the snippet always shows)."""
    while at > floor and at < len(text) and _is_word(text[at - 1]) and _is_word(text[at]):
        at -= 1
    return at


def _is_word(char: str) -> bool:
    return _RUN.match(char) is not None


def mark_words(words: Sequence[str], terms: QueryTerms, size: int = SNIPPET_WORDS,
               scan: int = SCAN_WORDS) -> str | None:
    """The HTML snippet of a stored word sequence: ``size`` words around the first matched one
    among the first ``scan``, matched words marked; None without a match there."""
    if not terms:
        return None
    first = next((i for i, w in enumerate(words[:scan]) if isinstance(w, str) and terms.matches(w)), None)
    if first is None:
        return None
    start = max(0, first - size // 4)
    window = [w for w in words[start:start + size] if isinstance(w, str)]
    shown = " ".join(_marked(w) if terms.matches(w) else html.escape(w) for w in window)
    return (ELLIPSIS + " " if start > 0 else "") + shown + (" " + ELLIPSIS if start + size < len(words) else "")
