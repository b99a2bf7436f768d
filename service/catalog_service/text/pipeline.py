"""Word pipeline of Plone's ``plone_lexicon``, re-implemented without Zope.

Plone indexes ``SearchableText``, ``Title`` and ``Description`` with the lexicon
``plone_lexicon``: the "Unicode Whitespace splitter" followed by the "Unicode
Ignoring Accents Case Normalizer" (``Products.CMFPlone.UnicodeSplitter``), no
stop words. The functions here give the same words, in the same order.

Splitting (documents and queries alike):

1. The text is NFKC-normalised (so full-width letters, ligatures and
   compatibility characters become their plain forms).
2. Words are the runs of Python ``\\w`` characters (letters, digits, ``_``; not
   combining marks, so Thai vowel signs end a word).
3. A word is cut where it changes between four classes: kana and CJK
   ideographs, Hangul syllables, Thai, and everything else.
4. A piece of the "everything else" class is one word. A CJK, Hangul or Thai
   piece becomes overlapping bigrams followed by its last character alone:
   ``日本人`` -> ``日本 本人 人``; ``金`` -> ``金``.

Normalising, per word: if the first character lies in U+0041..U+024F (Basic
Latin letters and digits excluded below ``A``, Latin-1, Latin Extended-A/B and
the punctuation between them, such as ``_``), the whole word is transliterated
with Unidecode, stripped, reduced to printable ASCII and lower-cased
(``Égalité`` -> ``egalite``, ``Straße`` -> ``strasse``). Any other word is only
lower-cased: ``Ελληνικά`` -> ``ελληνικά``, ``1é`` -> ``1é``. A transliteration
can be empty, or contain ASCII punctuation such as ``?`` (``aʔ`` -> ``a?``);
Plone stores such words as they are, and so do we.

Queries split the same way but keep ``*`` and ``?`` inside words (a word must
still start with a ``\\w`` character), and treat CJK, Hangul and Thai pieces
differently; see :func:`query_words`.

Unicode data (``\\w``, NFKC, ``lower()``) comes from the running Python and the
transliteration from the installed Unidecode: both sides should run the same
versions, as Python 3.11 and Unidecode 1.4 do here.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Iterator, Sequence
from functools import lru_cache

from unidecode import unidecode

__all__ = ["index_words", "lookup_word", "normalize_word", "query_words", "text_values"]

# The scripts that are split into bigrams instead of whole words, one class each.
_HANGUL = "\uac00-\ud7af"
_CJ = "\u3040-\u30ff\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff"
_THAI = "\u0e00-\u0e7f"
_BIGRAM_CLASSES = _HANGUL + _CJ + _THAI

_WORD = re.compile(r"\w+")
_GLOB_WORD = re.compile(r"\w+[\w*?]*")
# Pieces of one word: a run of "other" characters (``*`` and ``?`` included),
# or a run of one bigram class.
_PIECE = re.compile(rf"[^{_BIGRAM_CLASSES}]+|[{_HANGUL}]+|[{_CJ}]+|[{_THAI}]+")
_BIGRAM_CHAR = re.compile(rf"[{_BIGRAM_CLASSES}]")

# baseNormalize keeps printable ASCII and ASCII whitespace only.
_ASCII_KEPT = frozenset(string.ascii_letters + string.digits + string.punctuation + " \t\n\r\x0b\x0c")
_GLOB_CHARS = "*?"

# The longest word kept, in characters: a longer one (a pasted hash or base64 run) is cut to its
# first MAX_WORD characters, in documents and in queries alike. The lexicon's words are B-tree keys,
# and PostgreSQL refuses B-tree entries over 2,704 bytes (500 characters are at most 2,000 bytes of
# UTF-8). ZCatalog keeps such words whole; the only difference is that two words sharing their
# first 500 characters are one word here.
MAX_WORD = 500


def _capped(words: list[str]) -> list[str]:
    if words and max(map(len, words)) > MAX_WORD:
        return [w[:MAX_WORD] for w in words]
    return words


def _text_list(text: str | Sequence[str]) -> Sequence[str]:
    if isinstance(text, str):
        return (text,)
    if isinstance(text, bytes):
        raise TypeError("text must be str or a sequence of str, not bytes")
    return text


def _bigrams(piece: str, keep_last_char: bool) -> list[str]:
    stop = len(piece) if keep_last_char else len(piece) - 1
    return [piece[i : i + 2] for i in range(stop)]


def _split_document(text: str) -> Iterator[str]:
    """The pieces of an NFKC-normalised document that has CJK, Hangul or Thai in it."""
    for word in _WORD.findall(text):
        for piece in _PIECE.findall(word):
            if _BIGRAM_CHAR.match(piece):
                yield from _bigrams(piece, keep_last_char=True)
            else:
                yield piece


def _split_query(text: str) -> Iterator[str]:
    for word in _GLOB_WORD.findall(unicodedata.normalize("NFKC", text)):
        # A piece made only of "*", "?" or "*?" (a substring test in Plone) is
        # dropped; longer runs such as "**" survive as words of their own.
        pieces = [p for p in _PIECE.findall(word) if p not in _GLOB_CHARS]
        for position, piece in enumerate(pieces):
            if not _BIGRAM_CHAR.match(piece):
                yield piece
            elif len(piece) == 1:
                # A lone CJK character in a query matches every bigram it starts.
                yield piece + "*"
            else:
                # The last piece drops its trailing single character, so "日本"
                # in a query is the bigram "日本" and not "日本 本".
                yield from _bigrams(piece, keep_last_char=position != len(pieces) - 1)


@lru_cache(maxsize=1 << 16)
def normalize_word(word: str) -> str:
    """Fold one split word as the "Unicode Ignoring Accents Case Normalizer" does.

    Cached: word frequencies follow Zipf's law, so a small cache serves most words of a rebuild."""
    if not word:
        # Plone's normaliser fails on an empty word (it reads word[0]).
        raise ValueError("cannot normalise an empty word")
    if 0x41 <= ord(word[0]) <= 0x24F:
        ascii_word = unidecode(word).strip()
        word = "".join(c for c in ascii_word if c in _ASCII_KEPT).lower()
    return word.lower()


def text_values(*values: object) -> list[str] | None:
    """The strings ZCTextIndex indexes for an object, or None if the object is not in the index.

    ``values`` are the object's values of the index's attributes (one, or
    several for an index over ``Title,Description``). Lists, tuples and sets
    contribute their elements; anything that is not a string is dropped.
    None means ZCTextIndex.index_object does nothing: the object is not
    indexed, and an entry from an earlier value stays as it was. ``[""]`` is
    indexed: a document with no words.
    """
    texts: list[object] = []
    for value in values:
        if isinstance(value, list | tuple | set):
            texts.extend(value)
        elif value is not None:
            texts.append(value)
    strings = [t for t in texts if isinstance(t, str)]
    return strings or None


def index_words(text: str | Sequence[str]) -> list[str]:
    """The words the lexicon stores for a document, in order, duplicates kept.

    ``text`` is the indexed value: a string, or a sequence of strings as
    ZCTextIndex passes when an object has several values (they are split one
    after the other, as if concatenated with a word break between them). The
    length of the result is the document length used by Okapi scoring.
    """
    words: list[str] = []
    for s in _text_list(text):
        if s.isascii():
            # ASCII text: NFKC and unidecode change nothing, no bigram scripts, and every word
            # the splitter keeps is folded to lower case only.
            words.extend(_WORD.findall(s.lower()))
        else:
            text = unicodedata.normalize("NFKC", s)
            if _BIGRAM_CHAR.search(text):
                words.extend(map(normalize_word, _split_document(text)))
            else:
                # No CJK, Hangul or Thai: every word is one piece (the common case for European
                # text; one findall and the cached normaliser, without the generators).
                words.extend(map(normalize_word, _WORD.findall(text)))
    return _capped(words)


def query_words(term: str) -> list[str]:
    """The words of one query term (Lexicon.parseTerms): split keeping globs, then normalised.

    ``term`` is one token of the query language (a bare word, or a quoted
    phrase with its quotes, possibly with a leading ``-``); characters that
    are not word characters, ``*`` or ``?`` are word breaks. CJK, Hangul and
    Thai pieces become bigrams, but the last piece of a word drops its trailing
    single character, and a piece of one character becomes the glob ``X*``.
    One word is an atom (or a glob if it contains ``*`` or ``?``); several
    words are a phrase; none means the term is ignored.
    """
    return [w if "*" in w or "?" in w else w[:MAX_WORD] for w in map(normalize_word, _split_query(term))]


def lookup_word(word: str) -> str:
    """The lexicon word searched for a non-glob query word (Lexicon.termToWordIds).

    ZCTextIndex removes ``*`` and ``?`` and normalises the already normalised
    word a second time, which is not always a no-op: ``ẞx`` is indexed as
    ``ßx`` but looked up as ``ssx``. Raises ValueError where ZCTextIndex fails
    (the word is empty once the glob characters are gone).
    """
    return normalize_word(word.replace("*", "").replace("?", ""))[:MAX_WORD]
