"""ZCTextIndex's query language, parsed the way Products.ZCTextIndex.QueryParser does.

Grammar (keywords in any mix of case)::

    query    := or_expr EOF
    or_expr  := and_expr ("OR" and_expr)*
    and_expr := term ("AND" not_expr)*
    not_expr := "NOT" term | term
    term     := "(" or_expr ")" | atom atom*

Tokens are ``(``, ``)``, and atoms: an optional ``-`` followed by either a
double-quoted string or a run of characters other than white space,
parentheses and ``"``. An atom equal (ignoring case) to AND, OR or NOT is the
keyword. Unmatched ``"`` characters are skipped. Each atom is split with
:func:`~catalog_service.text.pipeline.query_words`: no words means the atom is
ignored, one word is an :class:`Atom` (a :class:`Glob` if it holds ``*`` or
``?``), several words a :class:`Phrase` (so ``foo-bar`` is the phrase "foo
bar"). A leading ``-`` negates the atom. Consecutive atoms are joined by AND,
with negated ones moved after the others.

Only atoms are joined implicitly: ``a (b)``, ``(a) b`` and ``a NOT b`` are
syntax errors, ``a AND NOT b`` is not. :class:`Not` appears only as a child of
:class:`And`, and every :class:`And` has at least one child that is not a Not.

Where ZCTextIndex raises, :func:`parse_query` raises :class:`TextQueryError`:

- a syntax error: an empty or blank query, a lone or trailing operator,
  unbalanced parentheses, ``()``, ``a NOT b``, ``NOT a`` at the start;
- a term with only negated atoms (``-a``, ``-a -b``, ``a AND -b``);
- a query whose atoms all produce no words (``...``, ``-``, ``"!"``);
- (at search time in ZCTextIndex) a word that is empty once normalised, or
  once its ``*``/``?`` are removed (``Ɂ``, a phrase holding the CJK glob run
  ``日本**``), a glob that starts with ``*`` or ``?`` once normalised
  (``Ɂ*``: the letter transliterates to nothing), or a glob whose prefix is
  an invalid regular expression (ZCTextIndex uses the prefix unescaped; some
  letters transliterate to ``(``, ``[`` or ``|``).

Where ZCTextIndex returns nothing or ignores parts instead of raising:

- an atom with no words inside a larger query is dropped (``foo ...`` is
  ``foo``); an And whose positive parts are all dropped is dropped with its
  negated parts (``foo OR (... AND NOT bar)`` is ``foo``);
- a word absent from the index matches no document; a phrase with any absent
  word matches none; ``a AND NOT b`` with ``b`` absent is ``a``.

The ZCatalog index itself skips a query string that is exactly empty (after
joining a list of strings with spaces); :func:`parse_query` raises for it, so
the caller checks that first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from catalog_service.errors import QueryError
from catalog_service.text.pipeline import lookup_word, query_words

__all__ = ["And", "Atom", "Glob", "Node", "Not", "Or", "Phrase", "TextQueryError", "parse_query"]


class TextQueryError(QueryError, ValueError):
    """A full-text query that ZCTextIndex would refuse (it raises ParseError or fails)."""

    title = "Invalid text query"


@dataclass(frozen=True)
class Atom:
    """Documents containing ``word`` (a lexicon word, as :func:`index_words` gives)."""

    word: str


@dataclass(frozen=True)
class Phrase:
    """Documents containing ``words`` consecutively, in this order."""

    words: tuple[str, ...]


@dataclass(frozen=True)
class Glob:
    """Documents containing any lexicon word that matches ``pattern``.

    ``*`` matches any run of characters, ``?`` exactly one. The pattern never
    starts with either, so only words starting with :attr:`prefix` can match.
    """

    pattern: str

    @property
    def prefix(self) -> str:
        """The literal start of the pattern, before the first ``*`` or ``?``."""
        return _split_glob(self.pattern)[0]

    def matches(self, word: str) -> bool:
        """Whether ZCTextIndex's glob expansion selects the lexicon word ``word``."""
        prefix, rest = _split_glob(self.pattern)
        if not word.startswith(prefix):
            return False
        if re.escape(prefix) != prefix:
            # A prefix that is a regular expression (ZCTextIndex does not escape it): its regex.
            return _glob_regex(self.pattern).match(word) is not None
        return _wildcards_match(rest, word[len(prefix):])

    @property
    def like_pattern(self) -> str | None:
        """An equivalent SQL ``LIKE`` pattern (escape character ``\\``), or None.

        None when the prefix holds regular-expression syntax (ZCTextIndex uses
        it unescaped, so only :meth:`matches` is exact); then select candidates
        with ``starts_with(word, prefix)`` and filter them with :meth:`matches`.
        """
        prefix, rest = _split_glob(self.pattern)
        if re.escape(prefix) != prefix:
            return None
        wildcards = {"*": "%", "?": "_"}
        return "".join(_like_literal(c) for c in prefix) + "".join(
            wildcards.get(c) or _like_literal(c) for c in rest
        )


def _like_literal(char: str) -> str:
    return "\\" + char if char in "\\%_" else char


@dataclass(frozen=True)
class Not:
    """Excludes the documents ``child`` matches; only a child of :class:`And`."""

    child: Node


@dataclass(frozen=True)
class And:
    """Documents matching every non-Not child and no Not child; scores add up."""

    children: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    """Documents matching any child; scores add up."""

    children: tuple[Node, ...]


Node = Atom | Phrase | Glob | Not | And | Or


def _split_glob(pattern: str) -> tuple[str, str]:
    cut = min((i for i in (pattern.find("*"), pattern.find("?")) if i >= 0), default=len(pattern))
    return pattern[:cut], pattern[cut:]


def _wildcards_match(pattern: str, word: str) -> bool:
    """Does all of ``word`` match ``pattern`` (``*`` any run, ``?`` one character)? The pieces
    between stars are found leftmost, in order, the last one at the end: at most about
    len(word) squared steps, where a backtracking regex of many stars (``a*?*?*?...``) took
    minutes on one long word."""
    pieces = pattern.split("*")
    if len(pieces) == 1:
        return _piece_at(pieces[0], word, 0) and len(word) == len(pieces[0])
    first, *middle, last = pieces
    if not _piece_at(first, word, 0):
        return False
    at = len(first)
    for piece in middle:
        found = next((i for i in range(at, len(word) - len(piece) + 1) if _piece_at(piece, word, i)), None)
        if found is None:
            return False
        at = found + len(piece)
    end = len(word) - len(last)
    return end >= at and _piece_at(last, word, end)


def _piece_at(piece: str, word: str, at: int) -> bool:
    """Does ``piece`` (``?`` any one character) match ``word`` from ``at``?"""
    if at + len(piece) > len(word):
        return False
    return all(p == "?" or p == w for p, w in zip(piece, word[at:at + len(piece)], strict=False))


@lru_cache(maxsize=1024)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    prefix, rest = _split_glob(pattern)
    translated = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in rest)
    # The prefix goes in unescaped, as in ZCTextIndex's Lexicon.globToWordIds.
    return re.compile(prefix + translated + "$")


# Tokens: a parenthesis, or an optional "-" then a quoted string or a run
# without white space, parentheses and double quotes.
_TOKEN = re.compile(r'[()]|-?(?:"[^"]*"|[^()\s"]+)')
_KEYWORDS = frozenset({"AND", "OR", "NOT", "(", ")"})
_ATOM = "ATOM"
_EOF = "EOF"


class _Parser:
    def __init__(self, query: str):
        self.tokens = _TOKEN.findall(query)
        self.kinds = [t.upper() if t.upper() in _KEYWORDS else _ATOM for t in self.tokens]
        self.tokens.append("")
        self.kinds.append(_EOF)
        self.position = 0

    def _describe(self) -> str:
        kind = self.kinds[self.position]
        return "the end of the query" if kind == _EOF else repr(self.tokens[self.position])

    def expect(self, kind: str) -> str:
        if self.kinds[self.position] != kind:
            wanted = {"ATOM": "a word", "EOF": "the end of the query", ")": "')'"}[kind]
            raise TextQueryError(f"expected {wanted}, found {self._describe()}")
        self.position += 1
        return self.tokens[self.position - 1]

    def accept(self, kind: str) -> bool:
        if self.kinds[self.position] == kind:
            self.position += 1
            return True
        return False

    def or_expr(self) -> Node | None:
        parts = [self.and_expr()]
        while self.accept("OR"):
            parts.append(self.and_expr())
        kept = [p for p in parts if p is not None]
        if not kept:
            return None
        return kept[0] if len(kept) == 1 else Or(tuple(kept))

    def and_expr(self) -> Node | None:
        first = self.term()
        positives = [] if first is None else [first]
        negatives = []
        while self.accept("AND"):
            node = self.not_expr()
            if isinstance(node, Not):
                negatives.append(node)
            elif node is not None:
                positives.append(node)
        if not positives:
            return None
        children = positives + negatives
        return children[0] if len(children) == 1 else And(tuple(children))

    def not_expr(self) -> Node | None:
        if self.accept("NOT"):
            node = self.term()
            return None if node is None else Not(node)
        return self.term()

    def term(self) -> Node | None:
        if self.accept("("):
            node = self.or_expr()
            self.expect(")")
            return node
        atoms = [self.atom()]
        while self.kinds[self.position] == _ATOM:
            atoms.append(self.atom())
        kept = [a for a in atoms if a is not None]
        if not kept:
            return None
        # Negated atoms go last, otherwise in query order.
        ordered = [a for a in kept if not isinstance(a, Not)] + [a for a in kept if isinstance(a, Not)]
        if isinstance(ordered[0], Not):
            raise TextQueryError("a term must have at least one positive word")
        return ordered[0] if len(ordered) == 1 else And(tuple(ordered))

    def atom(self) -> Node | None:
        token = self.expect(_ATOM)
        words = query_words(token)
        if not words:
            return None
        if len(words) > 1:
            node: Node = Phrase(tuple(words))
        elif "*" in words[0] or "?" in words[0]:
            node = Glob(words[0])
        else:
            node = Atom(words[0])
        return Not(node) if token.startswith("-") else node


def _resolve(node: Node) -> Node:
    """Turn query words into lookup words, failing where ZCTextIndex's search would."""
    match node:
        case Atom(word):
            return Atom(_lookup(word))
        case Phrase(words):
            return Phrase(tuple(_lookup(w) for w in words))
        case Glob(pattern):
            prefix, _ = _split_glob(pattern)
            if not prefix:
                raise TextQueryError(f"the glob {pattern!r} must not start with '*' or '?'")
            try:
                _glob_regex(pattern)
            except re.error as exc:
                raise TextQueryError(f"the glob {pattern!r} is not a valid pattern: {exc}") from None
            return node
        case Not(child):
            return Not(_resolve(child))
        case And(children):
            return And(tuple(_resolve(c) for c in children))
        case Or(children):
            return Or(tuple(_resolve(c) for c in children))
    raise TypeError(f"not a text query node: {node!r}")


def _lookup(word: str) -> str:
    try:
        return lookup_word(word)
    except ValueError:
        raise TextQueryError(f"the query word {word!r} is empty once normalised") from None


def parse_query(query: str) -> Node:
    """Parse a ZCTextIndex query into a tree of lookup words; raise TextQueryError where ZCTextIndex fails."""
    if not isinstance(query, str):
        raise TextQueryError(f"a text query must be a string, not {type(query).__name__}")
    parser = _Parser(query)
    try:
        tree = parser.or_expr()
        parser.expect(_EOF)
        if tree is None:
            raise TextQueryError(f"the query {query!r} contains no searchable words")
        return _resolve(tree)
    except RecursionError:
        # ZCTextIndex's recursive parser fails the same way on deep nesting.
        raise TextQueryError("the query is nested too deeply") from None
