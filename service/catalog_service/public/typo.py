"""Typo tolerance on the public search routes (opt-in: the ``typo`` parameter).

After the page of the query as asked (the *exact* matches), each word of its text criterion that
no object the caller may see holds (5 characters or more, at most ``MAX_WORDS`` words) is looked
up in the catalog's lexicon for words within its edit budget (``text.typos.edit_budget``). The
lexicon counts the words of every object, private and expired ones included, so a candidate is
kept only if a visible object (the caller's security and effective-date conditions, as the
search's) holds it; the candidates are ranked by edit distance, then by how many visible objects
hold them (counted up to ``COUNTED``), never by the lexicon's own counts. Whether a word is
corrected at all depends on visible objects only too: a word that only private content holds is
treated as a word the catalog lacks.

The corrected matches follow the exact ones: a second search of the query with each corrected
word replaced by its corrections (``c1 OR c2 OR c3``; the word itself adds nothing visible), and, when the exact query found something,
``AND NOT (the original text)`` so that no object is listed twice. The page is cut from the exact
result followed by the corrected one; ``items_total`` counts both.

Candidates one edit away are generated (``text.typos.edits1``: a few hundred strings) and looked
up by the lexicon's primary key. Two edits would be too many strings to generate, so for words of
9 characters or more fuzzystrmatch's ``levenshtein_less_equal`` compares the index's lexicon words
of about the right length that begin with the word's first letter (the distance allowed there is
twice the budget, since Levenshtein counts a transposition as two edits; the optimal string
alignment distance is then computed here), only when no word one edit away is found: a range of
the lexicon's primary key, a few milliseconds for 220,000 words (docs/decisions/0021). Where
the database lacks fuzzystrmatch (migration 0010 creates it where it may), long words get
one-edit corrections only.

A catalog's ``language`` setting (text.languages, docs/decisions/0025) changes three things: the
letters one-edit candidates are made of (the language's alphabet, as the lexicon holds it), no
corrections at all for languages where an edit is no measure of a typo (Chinese, Japanese, Thai,
...), and its stop words, which are never corrected and never a correction. Without one, ASCII
letters and no stop words.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..api.search import searched
from ..errors import LimitExceeded
from ..indexes.text import ZCTextIndex, _upper_bound
from ..planner.plan import Security
from ..planner.sql import Params
from ..store.catalogs import Catalog
from ..store.search import Page, search_page
from ..text import And, Glob, Node, Not, Or, TextQueryError, parse_query
from ..text.languages import Language, language
from ..text.typos import (
    ASCII_LETTERS,
    corrected,
    did_you_mean,
    edit_budget,
    edit_distance,
    edits1,
    positive_atoms,
    prefix_of,
    query_text,
    round_trips,
)
from .highlight import text_of, visible_rows
from .query import boolean_value

PARAMETER = "typo"
PREFERRED_INDEX = "SearchableText"
MAX_WORDS = 4  # words of one query corrected
MAX_CANDIDATES = 3  # corrections of one word searched for
SCANNED = 200  # visible lexicon candidates of one word compared
COUNTED = 100  # visible objects counted per candidate, for its rank


@dataclass(frozen=True)
class Typos:
    """The corrections of one query: ``corrections`` word -> candidates (best first) of the text
    index ``index``; ``did_you_mean`` the caller's text with each word's best candidate;
    ``exact`` how many items of the page are exact matches (the rest are corrected ones)."""

    index: str | None = None
    corrections: dict[str, list[str]] = field(default_factory=dict)
    did_you_mean: str | None = None
    exact: int | None = None


def typo_requested(value) -> bool:
    return value is not None and boolean_value(value, PARAMETER)


def corrected_index(query: dict, catalog: Catalog) -> str | None:
    """The text criterion corrected: SearchableText when the query has it, else the first text
    index of the query by name (one criterion only, so the corrected matches can exclude the
    exact ones with one NOT)."""
    names = sorted(n for n in query if isinstance(catalog.schema.indexes.get(n), ZCTextIndex) and text_of(query[n]))
    if PREFERRED_INDEX in names:
        return PREFERRED_INDEX
    return names[0] if names else None


@dataclass(frozen=True)
class _Visible:
    """The rows the caller may see and one text index's words: ``rows_holding(word_sql, limit)``
    is the SQL of how many visible rows hold the word (counted up to ``limit``), ``params``
    holding the values."""

    source: str
    where: str
    json: str
    params: Params

    def rows_holding(self, word_sql: str, limit: str) -> str:
        return (f"(select count(*) from (select 1 from {self.source} o where {self.where} and "
                f"{self.json} ? {word_sql} limit {limit}) s)")


def _visible(catalog: Catalog, limits, security: Security, index: str) -> _Visible:
    params = Params()
    source, where = visible_rows(catalog, limits, security, params)
    return _Visible(source, where, catalog.schema.indexes[index].json, params)


async def _visibly_held(conn, catalog: Catalog, limits, security: Security, index: str, text: str) -> bool:
    """Whether an object the caller may see matches the text query ``text`` in ``index``."""
    params = Params()
    source, where = visible_rows(catalog, limits, security, params, {index: text})
    return bool(await conn.fetchval(f"select exists (select 1 from {source} o where {where})", *params.values))


async def _has_levenshtein(conn) -> bool:
    return bool(await conn.fetchval("select to_regprocedure('levenshtein_less_equal(text,text,integer)') is not null"))


async def _candidates(conn, catalog: Catalog, limits, security: Security, index: str, word: str, budget: int,
                      fuzzy: bool, lang: Language | None = None) -> list[tuple[str, int]]:
    """(lexicon word, visible objects holding it, counted up to COUNTED) within reach of ``word``,
    only words some visible object holds, none of ``lang``'s stop words."""
    v = _visible(catalog, limits, security, index)
    p = v.params
    lexicon = (f"l.catalog_id = {p.add(catalog.id, 'integer')} and l.index_name = {p.add(index, 'text')} "
               f"and l.df > 0")
    stop_words = lang.stop_words if lang is not None else frozenset()
    if fuzzy:
        # Two edits keep the first letter (Elasticsearch's fuzzy prefix_length 1): the lexicon's
        # primary key then reads the words of one letter, not the whole index.
        reach = p.add(2 * budget, "integer")
        target = p.add(word, "text")
        lexicon += f" and l.word >= {p.add(word[0], 'text')}"
        upper = _upper_bound(word[0])
        if upper is not None:
            lexicon += f" and l.word < {p.add(upper, 'text')}"
        # (levenshtein_less_equal raises past 255 characters; LONGEST_CORRECTED keeps the window below.)
        lexicon += (f" and length(l.word) between {p.add(len(word) - budget, 'integer')} and "
                    f"{p.add(len(word) + budget, 'integer')} and levenshtein_less_equal(l.word, {target}, {reach}) "
                    f"<= {reach}")
        if stop_words:
            lexicon += f" and l.word <> all({p.add(sorted(stop_words), 'text[]')})"
    else:
        letters = lang.letters_for(word) if lang is not None else ASCII_LETTERS
        lexicon += f" and l.word = any({p.add(sorted(edits1(word, letters) - stop_words), 'text[]')})"
    sql = (f"select d.word, d.docs from (select l.word, {v.rows_holding('l.word', p.add(COUNTED, 'bigint'))} as docs "
           f"from catalog_lexicon l where {lexicon}) d where d.docs > 0 order by d.word "
           f"limit {p.add(SCANNED, 'bigint')}")
    return [(r["word"], r["docs"]) for r in await conn.fetch(sql, *p.values)]


def rank(word: str, budget: int, found: list[tuple[str, int]]) -> list[str]:
    """The best MAX_CANDIDATES of ``found``: within the budget (optimal string alignment), nearest
    first, then the most held (by visible objects), then in code point order."""
    scored = []
    for candidate, docs in found:
        distance = edit_distance(word, candidate, budget)
        if candidate != word and distance <= budget and round_trips(candidate):
            scored.append((distance, -docs, candidate))
    return [c for _, _, c in sorted(scored)[:MAX_CANDIDATES]]


async def find_corrections(conn, catalog: Catalog, limits, security: Security, query: dict) -> Typos:
    """The corrections of the query's text criterion for a caller with ``security``."""
    index = corrected_index(query, catalog)
    if index is None:
        return Typos()
    text = text_of(query[index])
    try:
        tree = parse_query(text)
    except TextQueryError:
        return Typos(index=index)
    lang = language(catalog.settings.language)
    if lang is not None and not lang.corrects:
        return Typos(index=index)
    stop_words = lang.stop_words if lang is not None else frozenset()
    fuzzy: bool | None = None
    corrections: dict[str, list[str]] = {}
    globbed = {prefix_of(g) for g in _globs(tree)}
    for word in [w for w in positive_atoms(tree) if edit_budget(w) and w not in stop_words][:MAX_WORDS]:
        searched_as = word + "*" if word in globbed else f'"{word}"'
        if await _visibly_held(conn, catalog, limits, security, index, searched_as):
            continue
        budget = edit_budget(word)
        best = rank(word, 1, await _candidates(conn, catalog, limits, security, index, word, 1, fuzzy=False,
                                               lang=lang))
        if not best and budget > 1:
            if fuzzy is None:
                fuzzy = await _has_levenshtein(conn)
            if fuzzy:
                best = rank(word, budget, await _candidates(conn, catalog, limits, security, index, word, budget,
                                                            fuzzy=True, lang=lang))
        if best:
            corrections[word] = best
    if not corrections:
        return Typos(index=index)
    return Typos(index=index, corrections=corrections,
                 did_you_mean=did_you_mean(text, {w: c[0] for w, c in corrections.items()}))


def _globs(node: Node) -> list[Glob]:
    match node:
        case Glob():
            return [node]
        case And(children) | Or(children):
            return [g for c in children if not isinstance(c, Not) for g in _globs(c)]
    return []


def corrected_query(query: dict, typos: Typos, exclude_exact: bool) -> dict:
    """The query of the corrected matches: its text criterion corrected, and, when the exact
    query found objects, those left out."""
    tree = parse_query(text_of(query[typos.index]))
    text = query_text(corrected(tree, typos.corrections))
    if exclude_exact:
        text = f"({text}) AND NOT ({query_text(tree)})"
    value = query[typos.index]
    return {**query, typos.index: {**value, "query": text} if isinstance(value, dict) else text}


async def with_corrections(reader, catalog: Catalog, body, page: Page) -> tuple[Page, Typos]:
    """``page`` (the exact matches' page of ``body``) followed by the corrected matches, and the
    corrections. The corrected search runs like the exact one (api.search.searched: the caller's
    security, the public cost bounds); if those bounds refuse it, the answer keeps the exact
    matches and still names the corrections."""
    security = reader.security(body.show_inactive)
    typos = await find_corrections(reader.conn, catalog, reader.limits, security, body.query)
    if not typos.corrections or page.b_size is None:
        return page, dataclasses.replace(typos, exact=len(page.brains))
    extra = body.model_copy(update={
        "query": corrected_query(body.query, typos, exclude_exact=page.total > 0),
        "b_start": max(0, page.b_start - page.total), "b_size": max(0, page.b_size - len(page.brains)),
        "facets": []})
    try:
        more = await searched(reader.conn, reader.state, catalog, extra, reader.credential, reader.limits,
                              runner=search_page, refreshed=reader.refreshed)
    except LimitExceeded:
        return page, dataclasses.replace(typos, exact=len(page.brains))
    merged = dataclasses.replace(page, brains=page.brains + more.brains, total=page.total + more.total,
                                 complete=page.complete and more.complete,
                                 state=page.state if page.state == more.state else None)
    return merged, dataclasses.replace(typos, exact=len(page.brains))
