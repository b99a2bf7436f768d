"""Search-as-you-type suggestions: completions of the last typed word and matching titles, only
from content the caller may see (docs/decisions/0022-suggestions.md).

One statement per keystroke, read at one snapshot with the catalog's counter and schema revision
(for the ETag):

- words: the lexicon's words starting with the typed prefix (a range of its "C"-collated primary
  key), at most ``CANDIDATES`` of them, most frequent first; each kept only if one visible,
  effective object holds it (the text index's GIN answers "rows holding this word"), stopping at
  ``limit``. The lexicon counts every object, private and expired ones too, so it only proposes:
  the visibility probe decides, and no count from it is ever shown. The stop words of the
  catalog's language (text.languages) are never candidates.
- titles: visible, effective objects whose ``sortable_title`` starts with the typed text, in
  ``sortable_title`` order, read from that FieldIndex's btree (value, rid) and stopping at
  ``limit``.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
import orjson

from ..indexes.text import ZCTextIndex, _upper_bound
from ..indexes.unindex import FieldIndex
from ..planner.plan import CatalogSchema, Limits, Security, rows_overlay, select_rows
from ..planner.sql import Params, all_of
from ..text import index_words
from ..text.languages import language
from .catalogs import Catalog
from .search import StaleSchema, _fetch

# Lexicon words read for one prefix (the probes run on the most frequent of them, and stop at the
# limit). A prefix with more words is completed from the first CANDIDATES of them in word order.
CANDIDATES = 200
TITLE_INDEX = "sortable_title"
# Plone's sortable_title keeps the first 40 characters of the lower-cased title.
SORTABLE_TITLE_LENGTH = 40


@dataclass(frozen=True)
class Typed:
    """What the caller typed, in the forms the catalog stores: the last word's prefix as the
    lexicon holds words (Plone's splitter and normaliser), the text as sortable_title holds it."""

    prefix: str | None
    title_prefix: str | None

    @classmethod
    def of(cls, q: str) -> Typed:
        words = index_words(q)
        title = " ".join(q.lower().split())[:SORTABLE_TITLE_LENGTH]
        return cls(prefix=words[-1] if words and words[-1] else None, title_prefix=title or None)


@dataclass(frozen=True)
class Suggestions:
    words: list[str]
    # (uid, path, metadata) of each title's object.
    titles: list[tuple[str, str, dict]]
    # (catalog id, counter, schema revision) read with them: the ETag's state.
    state: tuple


def _visible(schema: CatalogSchema, security: Security, limits: Limits, params: Params) -> list[str]:
    """What the caller may see, as conditions on the row ``o``: the conditions the planner adds to
    every search (planner.plan.select_rows of an empty query): the principals, the effective
    date, and a scoped key's filter."""
    return list(select_rows({}, schema, limits, security, params, rows_overlay(schema, (), params)).conditions)


def _prefix_range(expr: str, prefix: str, params: Params) -> str:
    """``expr`` (a "C"-collated text) starts with ``prefix``, as a range an index can read."""
    upper = _upper_bound(prefix)
    found = [f"{expr} >= {params.add(prefix, 'text')}"]
    if upper is not None:
        found.append(f"{expr} < {params.add(upper, 'text')}")
    return all_of(found)


def words_sql(schema: CatalogSchema, index: ZCTextIndex, prefix: str, security: Security, limits: Limits,
              limit: int, params: Params, stop_words: frozenset[str] = frozenset()) -> str:
    """The visible completions of ``prefix`` other than ``stop_words``, as a text array in the
    order shown."""
    cat = params.add(schema.catalog_id, "integer")
    unstopped = f" and l.word <> all({params.add(sorted(stop_words), 'text[]')})" if stop_words else ""
    candidates = (f"select l.word, l.df from catalog_lexicon l where l.catalog_id = {cat} "
                  f"and l.index_name = {index.key} and {_prefix_range('l.word', prefix, params)} and l.df > 0"
                  f"{unstopped} order by l.word limit {CANDIDATES}")
    visible = _visible(schema, security, limits, params)
    held = f"exists (select 1 from {schema.table} o where {all_of([f'({index.json} ? c.word)', *visible])})"
    if index.has_cells:
        held = _held_by_cells(schema, index, cat, visible, held)
    # The candidates sorted by frequency, then filtered in that order: the limit ends the probes.
    return (f"array(select c.word from (select * from ({candidates}) k order by k.df desc, k.word) c "
            f"where {held} limit {params.add(limit, 'integer')})")


def _held_by_cells(schema: CatalogSchema, index: ZCTextIndex, cat: str, visible: list[str], held: str) -> str:
    """A visible row holds ``c.word``, probed cell by cell, smallest first (decision 0007's score
    cells: the word's rows in groups of about equal frequency and length, each its own entry of the
    cells' GIN). The word's own entry lists every row holding it: for a word a third of the catalog
    holds, reading it took most of a keystroke's time, while its smallest cell is a few rows, and
    one visible row ends the probe. Until the cells index is built and valid (a catalog made before
    it), the word's own entry (``held``)."""
    token = "(x.fb || ':' || x.lb || ':' || x.word) collate \"default\""
    in_cell = all_of([f"({index.cells_sql()} ? {token})", *visible])
    # The cells sorted first, then probed in that order (a sorted subquery is not flattened).
    cells = (f"(select true from (select * from catalog_text_cell x where x.catalog_id = {cat} "
             f"and x.index_name = {index.key} and x.word = c.word and x.n > 0 order by x.n) x "
             f"where exists (select 1 from {schema.table} o where {in_cell}) limit 1) is not null")
    cells_index = f"'{index.index_name(schema.table, 'c')}'"  # a checked identifier, as a literal
    usable = (f"exists (select 1 from pg_index i where i.indexrelid = to_regclass({cells_index}) "
              f"and i.indisvalid)")
    return f"(case when {usable} then {cells} else {held} end)"


def titles_sql(schema: CatalogSchema, title_index: FieldIndex, prefix: str, security: Security, limits: Limits,
               limit: int, params: Params) -> str:
    """The visible objects whose sortable title starts with ``prefix``, as a JSON array of
    [uid, path, metadata] in sortable-title order."""
    value = title_index.value_expr()
    conditions = [_prefix_range(value, prefix, params), *_visible(schema, security, limits, params)]
    return (f"(select coalesce(jsonb_agg(jsonb_build_array(t.uid, t.path, t.meta) order by t.n), '[]') "
            f"from (select o.uid, o.path, o.meta, row_number() over (order by {value}, o.rid) as n "
            f"from {schema.table} o where {all_of(conditions)} order by {value}, o.rid "
            f"limit {params.add(limit, 'integer')}) t)")


def title_index_of(schema: CatalogSchema) -> FieldIndex | None:
    index = schema.indexes.get(TITLE_INDEX)
    return index if isinstance(index, FieldIndex) and index.cast == "text" else None


def suggest_sql(schema: CatalogSchema, index: ZCTextIndex | None, typed: Typed, security: Security,
                limits: Limits, limit: int, stop_words: frozenset[str] = frozenset()) -> tuple[str, list]:
    """One statement: the catalog's counter and schema revision, the words and the titles."""
    params = Params()
    cat = params.add(schema.catalog_id, "integer")
    words = "'{}'::text[]"
    if index is not None and typed.prefix is not None:
        words = words_sql(schema, index, typed.prefix, security, limits, limit, params, stop_words)
    titles = "'[]'::jsonb"
    title_index = title_index_of(schema)
    if title_index is not None and typed.title_prefix is not None:
        titles = titles_sql(schema, title_index, typed.title_prefix, security, limits, limit, params)
    sql = (f"select c.counter, c.schema_rev, {words} as words, {titles} as titles "
           f"from catalog c where c.id = {cat}")
    return sql, params.values


async def suggestions(conn: asyncpg.Connection, catalog: Catalog, index: ZCTextIndex | None, typed: Typed,
                      security: Security, limits: Limits, limit: int) -> Suggestions:
    """Raises StaleSchema when the catalog changed since ``catalog`` was loaded."""
    lang = language(catalog.settings.language)
    sql, params = suggest_sql(catalog.schema, index, typed, security, limits, limit,
                              lang.stop_words if lang is not None else frozenset())
    # A generic plan, made once per connection: planning this statement took 2-5 ms, several times
    # its run, and its plan does not depend on the values (the same index reads for every prefix:
    # the lexicon's key range, the word's cells, the sortable title's range, each cut by a limit).
    rows = await _fetch(conn, sql, params, generic_plan=True)
    row = rows[0] if rows else None
    if row is None or row["schema_rev"] != catalog.schema_rev:
        raise StaleSchema()
    titles = [(uid, path, meta) for uid, path, meta in orjson.loads(row["titles"])]
    return Suggestions(words=list(row["words"]), titles=titles,
                       state=(catalog.id, row["counter"], row["schema_rev"]))
