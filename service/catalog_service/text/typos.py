"""Typo tolerance for text queries: how far a word may be from the word meant, and the query
with corrections put in. Pure functions, no I/O (``public/typo.py`` finds the candidates).

- :func:`edit_budget`: a word of fewer than 5 characters is never corrected (too many words lie
  one edit from it), 5 to 8 characters allow one edit, longer words two.
- :func:`edit_distance`: the optimal string alignment distance (Levenshtein's insertions,
  deletions and substitutions, plus the transposition of two adjacent characters as one edit,
  the commonest typing slip: ``muesum`` is one edit from ``museum``, two for Levenshtein).
- :func:`corrected`: a parsed query with each corrected word replaced by its corrections
  (``c1 OR c2``); :func:`query_text` writes a tree back as ZCTextIndex query text, so the
  corrected query runs through the planner like any other (``parse_query(query_text(t)) == t``).
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping

from .pipeline import normalize_word
from .query import And, Atom, Glob, Node, Not, Or, Phrase, TextQueryError, parse_query

__all__ = ["corrected", "did_you_mean", "edit_budget", "edit_distance", "edits1", "positive_atoms",
           "prefix_of", "query_text", "round_trips"]

SHORTEST_CORRECTED = 5
ONE_EDIT_UP_TO = 8
# Longer words are not corrected: a word of n distinct letters has about 2n(36 + n) one-edit
# candidates, built and sent to the database per request (a 249-letter word of distinct Yi
# syllables made 142,000 of 249 characters each), and real misspellings are shorter. (Also below
# fuzzystrmatch's limit of 255 characters.)
LONGEST_CORRECTED = 40
# Letters tried by edits1 beyond the word's own: what the lexicon folds Latin text to.
ASCII_LETTERS = string.ascii_lowercase + string.digits


def edit_budget(word: str) -> int:
    """Edits a correction of ``word`` may be away from it."""
    if len(word) < SHORTEST_CORRECTED or len(word) > LONGEST_CORRECTED:
        return 0
    return 1 if len(word) <= ONE_EDIT_UP_TO else 2


def edit_distance(a: str, b: str, limit: int | None = None) -> int:
    """The optimal string alignment distance of ``a`` and ``b``; with ``limit``, any value above it
    may be answered as ``limit + 1`` (the rows stop early)."""
    if limit is not None and abs(len(a) - len(b)) > limit:
        return limit + 1
    before, row = None, list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            current[j] = min(row[j] + 1, current[j - 1] + 1, row[j - 1] + (ca != cb))
            if before is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], before[j - 2] + 1)
        if limit is not None and min(current) > limit:
            return limit + 1
        before, row = row, current
    return row[-1]


def edits1(word: str, letters: str = ASCII_LETTERS) -> set[str]:
    """Every string one edit (or one transposition) from ``word``, with insertions and
    substitutions from ``letters`` and the word's own characters: the candidates looked up when
    the database has no fuzzystrmatch."""
    alphabet = set(letters) | set(word)
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    found = {a + b[1:] for a, b in splits if b}
    found |= {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
    found |= {a + c + b[1:] for a, b in splits if b for c in alphabet}
    found |= {a + c + b for a, b in splits for c in alphabet}
    found.discard(word)
    return found


def prefix_of(glob: Glob) -> str | None:
    """The word of a glob that is a word and one trailing ``*`` (what Plone's search form and
    plone.app.querystring's ``contains`` send for the last word), else None."""
    word = glob.pattern[:-1]
    return word if glob.pattern.endswith("*") and "*" not in word and "?" not in word else None


def positive_atoms(node: Node) -> list[str]:
    """The single words a query searches for, outside its ``NOT`` parts, in query order: its
    atoms, and the words of its ``word*`` globs."""
    match node:
        case Atom(word):
            return [word]
        case Glob():
            return [w for w in [prefix_of(node)] if w]
        case And(children) | Or(children):
            return list(dict.fromkeys(w for c in children if not isinstance(c, Not) for w in positive_atoms(c)))
    return []


def corrected(node: Node, corrections: Mapping[str, Iterable[str]]) -> Node:
    """``node`` with every positive atom ``w`` that ``corrections`` names replaced by its
    corrections, ``c1`` or ``(c1 OR c2 ...)``, and every ``w*`` by the first one's ``c1*`` (one
    glob stays one glob: the public cost bounds count them); ``NOT`` parts kept as they are.
    ``w`` itself is left out: it is corrected because no object the caller may see holds it, so it
    adds no match and no score, and a single correction keeps a one-word query on the fast
    relevance path (docs/decisions/0007)."""
    match node:
        case Atom(word) if corrections.get(word):
            found = [Atom(c) for c in corrections[word]]
            return found[0] if len(found) == 1 else Or(tuple(found))
        case Glob() if corrections.get(prefix_of(node) or ""):
            return Glob(next(iter(corrections[prefix_of(node)])) + "*")
        case And(children):
            return And(tuple(c if isinstance(c, Not) else corrected(c, corrections) for c in children))
        case Or(children):
            return Or(tuple(corrected(c, corrections) for c in children))
    return node


def query_text(node: Node) -> str:
    """ZCTextIndex query text that parses back to ``node``: words quoted (so that a word such as
    ``and`` is no operator), every part of And, Or and Not in parentheses."""
    match node:
        case Atom(word):
            return f'"{word}"'
        case Phrase(words):
            return '"' + " ".join(words) + '"'
        case Glob(pattern):
            return pattern
        case And(children):
            positive = [f"({query_text(c)})" for c in children if not isinstance(c, Not)]
            negative = [f"NOT ({query_text(c.child)})" for c in children if isinstance(c, Not)]
            return " AND ".join(positive + negative)
        case Or(children):
            return " OR ".join(f"({query_text(c)})" for c in children)
    raise TypeError(f"not a text query node: {node!r}")


def round_trips(word: str) -> bool:
    """Whether the lexicon word ``word`` is searched for as itself when written in a query (a word
    holding characters the query splitter breaks at, or one the lookup folds again, is not)."""
    try:
        return parse_query(f'"{word}"') == Atom(word)
    except TextQueryError:
        return False


_QUERY_WORD = re.compile(r"\w+")


def did_you_mean(text: str, best: Mapping[str, str]) -> str:
    """The caller's query text with each word that folds to a corrected word replaced by its best
    correction, the rest (case, operators, punctuation) as the caller wrote it."""
    def replace(match: re.Match) -> str:
        found = match.group()
        try:
            return best.get(normalize_word(found), found)
        except ValueError:
            return found

    return _QUERY_WORD.sub(replace, text)
