"""Highlighting on the public search routes (opt-in: the ``highlight`` parameter).

For each item of the page, and only those, a snippet per field with the query's matched words
marked (``catalog_service.text.snippets``): metadata columns (``Title``, ``Description``) from
their original text, text indexes (``SearchableText``) from the word sequence the catalog stores,
since the catalog keeps no source text of them (docs/decisions/0021). The words marked are the
positive words and globs of every text criterion of the query (plus, with ``typo``, the
corrections the answer names).

The word sequences are read in one statement for the page's uids, with the caller's security and
effective-date conditions again (an object changed between the search and this read is shown
only if it is still visible), and only their first ``SCAN_WORDS`` + 1 words
(``jsonb_path_query_array``), so the work per item is bounded whatever the document's length.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from catalog_schemas.public_values import public_value

from ..indexes.text import ZCTextIndex
from ..planner.plan import Security, rows_overlay, select_rows
from ..planner.sql import Params, all_of
from ..store.catalogs import Catalog
from ..store.search import Brain
from ..text import TextQueryError, parse_query
from ..text.snippets import SCAN_WORDS, QueryTerms, mark_text, mark_words, terms_of
from .query import FALSY, TRUTHY, InvalidParameter

PARAMETER = "highlight"
DEFAULT_FIELDS = ("Title", "Description", "SearchableText")
# The largest page highlighted: each item's text is read and scanned.
MAX_ITEMS = 100


@dataclass(frozen=True)
class HighlightFields:
    """What to highlight: metadata columns (original text) and text indexes (word sequences), in
    the order asked."""

    names: tuple[str, ...]
    metadata: frozenset[str]

    @property
    def indexes(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if n not in self.metadata)


def _source(name: str, catalog: Catalog) -> str | None:
    """'metadata' when the field is a metadata column (its original text is known), 'index' for a
    text index without one, None for neither."""
    if name in catalog.metadata_names:
        return "metadata"
    if isinstance(catalog.schema.indexes.get(name), ZCTextIndex):
        return "index"
    return None


def highlight_fields(value, catalog: Catalog) -> HighlightFields | None:
    """The fields ``highlight`` names: a boolean (``true``: those of Title, Description and
    SearchableText the catalog has), or field names (a list, or comma-separated text). None when
    the parameter is absent or false."""
    if value is None or value is False:
        return None
    if isinstance(value, str) and value.strip().lower() in FALSY:
        return None
    if value is True or (isinstance(value, str) and value.strip().lower() in TRUTHY):
        names = [n for n in DEFAULT_FIELDS if _source(n, catalog)]
    else:
        values = value if isinstance(value, list | tuple) else [value]
        if not all(isinstance(v, str) for v in values):
            raise InvalidParameter(f"{PARAMETER}: true, false, or field names", parameter=PARAMETER)
        names = list(dict.fromkeys(n.strip() for v in values for n in v.split(",") if n.strip()))
        unknown = [n for n in names if _source(n, catalog) is None]
        if unknown or not names:
            valid = sorted({*catalog.metadata_names} | {n for n, i in catalog.schema.indexes.items()
                                                         if isinstance(i, ZCTextIndex)})
            raise InvalidParameter(f"{PARAMETER}: {', '.join(map(repr, unknown)) or 'no field'} is no metadata "
                                   f"column or text index; valid: true, false, {', '.join(valid)}",
                                   parameter=PARAMETER, valid=valid)
    return HighlightFields(names=tuple(names),
                           metadata=frozenset(n for n in names if _source(n, catalog) == "metadata"))


def check_page_size(b_size: int | None) -> None:
    if b_size is not None and b_size > MAX_ITEMS:
        raise InvalidParameter(f"{PARAMETER}: pages of at most {MAX_ITEMS} items are highlighted, b_size is {b_size}",
                               parameter="b_size")


def text_of(value) -> str | None:
    """A ZCTextIndex query value as ZCatalog joins it (a list's strings with spaces)."""
    if isinstance(value, dict):
        value = value.get("query")
    if isinstance(value, list | tuple):
        value = " ".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) and value else None


def query_terms(query: dict, catalog: Catalog) -> QueryTerms:
    """The words and globs the query's text criteria search for, over all its text indexes."""
    terms = QueryTerms(frozenset())
    for name, value in query.items():
        text = text_of(value) if isinstance(catalog.schema.indexes.get(name), ZCTextIndex) else None
        if text is None:
            continue
        try:
            terms = terms | terms_of(parse_query(text))
        except TextQueryError:
            continue  # the search refused it already, or it came from a caller's custom text
    return terms


def visible_rows(catalog: Catalog, limits, security: Security, params: Params, query: dict | None = None
                 ) -> tuple[str, str]:
    """(the catalog's committed rows, alias ``o``, and the SQL of the caller's security and
    effective-date conditions on them, and of ``query``'s if given), as the search applies them
    (planner.select_rows), their values added to ``params``."""
    overlay = rows_overlay(catalog.schema, (), params)
    selection = select_rows(query or {}, catalog.schema, limits, security, params, overlay)
    return overlay.source, all_of(selection.conditions)


async def stored_words(conn, catalog: Catalog, limits, security: Security, uids: list[str],
                       indexes: tuple[str, ...]) -> dict[str, list]:
    """uid -> one list per index of ``indexes``: its first SCAN_WORDS + 1 stored words (or [])
    for the visible objects among ``uids``."""
    if not uids or not indexes:
        return {}
    params = Params()
    source, visible = visible_rows(catalog, limits, security, params)
    words = ", ".join(f"jsonb_path_query_array({catalog.schema.indexes[n].json}, '$[0 to {SCAN_WORDS}]')::text"
                      for n in indexes)
    sql = (f"select o.uid, array[{words}] as words from {source} o "
           f"where o.catalog_id = {params.add(catalog.id, 'integer')} and o.uid = any({params.add(uids, 'text[]')}) "
           f"and {visible}")  # the primary key is (catalog_id, uid)
    rows = await conn.fetch(sql, *params.values)
    return {r["uid"]: [orjson.loads(w) if w else [] for w in r["words"]] for r in rows}


def _plain_text(value) -> str | None:
    value = public_value(value)
    if isinstance(value, list | tuple):
        value = " ".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) else None


def item_highlight(brain: Brain, fields: HighlightFields, terms: QueryTerms, words: list | None) -> dict:
    """field -> snippet, for the fields with a match (a field without one is left out)."""
    found = {}
    sequences = dict(zip(fields.indexes, words or [], strict=False))
    for name in fields.names:
        if name in fields.metadata:
            text = _plain_text(brain.metadata.get(name))
            snippet = mark_text(text, terms) if text else None
        else:
            sequence = sequences.get(name)
            snippet = mark_words(sequence, terms) if isinstance(sequence, list) else None
        if snippet is not None:
            found[name] = snippet
    return found


async def page_highlights(reader, catalog: Catalog, brains: list[Brain], fields: HighlightFields,
                          terms: QueryTerms, security: Security) -> list[dict]:
    """One highlight mapping per brain of the page, in order."""
    words = await stored_words(reader.conn, catalog, reader.limits, security, [b.uid for b in brains],
                               fields.indexes) if terms else {}
    return [item_highlight(b, fields, terms, words.get(b.uid)) for b in brains]
