"""ZCTextIndex with Plone's lexicon: documents stored as their word sequence (a JSON array).

Words come from ``catalog_service.text.index_words`` (Plone's splitter and accent-ignoring case
normaliser). A GIN index on the array answers words and globs (through the catalog's lexicon
table); phrases are checked on the sequence itself.
"""

from __future__ import annotations

from typing import Any

from ..errors import QueryError
from ..planner.sql import all_of, any_of
from ..text import And, Atom, Glob, Not, Or, Phrase, index_words, parse_query, text_values
from .base import MISSING, BadValue, Index, IndexQuery, QueryContext


def _upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix`` (code point order)."""
    for i in range(len(prefix) - 1, -1, -1):
        code = ord(prefix[i])
        if code < 0x10FFFF and not 0xD7FF <= code < 0xE000:
            return prefix[:i] + chr(code + 1)
    return None


class ZCTextIndex(Index):
    type_name = "ZCTextIndex"
    query_options = ("query",)
    operators = ("or",)

    # Word sequences live in the row's `text` document, not in `idx` (see 0001-catalog-storage).
    @property
    def json(self) -> str:
        return f"(o.text->{self.key})"

    @property
    def has_value(self) -> str:
        return f"(o.text ? {self.key})"

    def stored(self, value: Any) -> Any:
        if isinstance(value, dict):
            raise BadValue(f"index {self.name!r}: text must be a string or a list of strings")
        texts = text_values(value)
        if texts is None:
            return MISSING  # not text: ZCTextIndex leaves the object's entry as it was
        return index_words(texts)

    def condition(self, q: IndexQuery, ctx: QueryContext) -> str:
        if not all(isinstance(k, str) for k in q.keys):
            raise QueryError(f"index {self.name!r}: a text query must be a string")
        text = " ".join(q.keys)
        if not text:
            return "false"  # ZCTextIndex returns no result set, which empties the catalog's
        return self._node(parse_query(text), ctx)

    def _node(self, node, ctx: QueryContext) -> str:
        p = ctx.params
        match node:
            case Atom(word):
                return f"({self.json} ? {p.add(word, 'text')})"
            case Phrase(words):
                arr = p.add(list(words), "text[]")
                return f"({self.json} ?& {arr} and catalog_phrase_match({self.json}, {arr}))"
            case Glob():
                return f"({self.json} ?| {self._glob_words(node, ctx)})"
            case And(children):
                positive = [self._node(c, ctx) for c in children if not isinstance(c, Not)]
                negative = [f"({self._node(c.child, ctx)}) is not true" for c in children if isinstance(c, Not)]
                return all_of(positive + negative)
            case Or(children):
                return any_of([self._node(c, ctx) for c in children])
        raise QueryError(f"unsupported text query node {node!r}")

    # -- relevance ---------------------------------------------------------------------------
    def score(self, q: IndexQuery, ctx: QueryContext) -> str | None:
        """Okapi BM25 of the query for the row, as ZCTextIndex's OkapiIndex scores it."""
        text = " ".join(q.keys)
        if not text:
            return None
        p = ctx.params
        cat = p.add(ctx.catalog_id, "integer")
        stats = f"from catalog_text_stats st where st.catalog_id = {cat} and st.index_name = {self.key}"
        env = {
            "n": f"(select st.docs {stats})",
            "mean": f"(select st.words::float8 / nullif(st.docs, 0) {stats})",
            "len": f"jsonb_array_length({self.json})",
            "cat": cat,
        }
        return self._score(parse_query(text), ctx, env)

    def best_cells(self, q: IndexQuery, ctx: QueryContext, want: str) -> tuple[str, str] | None:
        """For a one-word query: SQL for the cells that can hold its best documents.

        Returns ``(cells, bound)``. ``cells`` is a query of the word's cells: their key as
        ``catalog_text_cells`` writes it (``token``), their number of documents (``n``) and the
        range of their documents' scores (``upper``, ``lower``). ``bound`` is an expression over
        the result of ``cells`` named ``cell``: the highest score such that the cells whose every
        document scores at least that much hold ``want`` documents or more, or null when the word
        has fewer documents than that. Every document scoring ``bound`` or more has one of the
        cells whose ``upper`` is at least ``bound`` (docs/decisions/0007)."""
        text = " ".join(q.keys)
        if not text or not isinstance(node := parse_query(text), Atom):
            return None
        p = ctx.params
        cat = p.add(ctx.catalog_id, "integer")
        word = p.add(node.word, "text")
        stats = f"from catalog_text_stats st where st.catalog_id = {cat} and st.index_name = {self.key}"
        n = f"(select st.docs {stats})"
        mean = f"(select st.words::float8 / nullif(st.docs, 0) {stats})"
        df = (f"(select l.df from catalog_lexicon l where l.catalog_id = {cat} and l.index_name = {self.key} "
              f"and l.word = {word})")
        # The lexicon's words are "C"-collated; the index holds the cells in the default collation,
        # and an array of another collation cannot use it.
        cells = (f"select (x.fb || ':' || x.lb || ':' || x.word) collate \"default\" as token, x.n, "
                 f"catalog_okapi(catalog_text_bucket_hi(x.fb), catalog_text_bucket_lo(x.lb), {n}, {df}, {mean}) as upper, "
                 f"catalog_okapi(catalog_text_bucket_lo(x.fb), catalog_text_bucket_hi(x.lb), {n}, {df}, {mean}) as lower "
                 f"from catalog_text_cell x where x.catalog_id = {cat} and x.index_name = {self.key} "
                 f"and x.word = {word}")
        bound = (f"(select c.lower from (select lower, sum(n) over (order by lower desc) as reach from cell) c "
                 f"where c.reach >= {want} order by c.lower desc limit 1)")
        return cells, bound

    def _word_score(self, word_sql: str, df_sql: str, env: dict) -> str:
        return (f"catalog_okapi(catalog_word_count({self.json}, {word_sql}), {env['len']}, {env['n']}, "
                f"{df_sql}, {env['mean']})")

    def _df(self, word_sql: str, env: dict) -> str:
        return (f"(select l.df from catalog_lexicon l where l.catalog_id = {env['cat']} "
                f"and l.index_name = {self.key} and l.word = {word_sql})")

    def _score(self, node, ctx: QueryContext, env: dict) -> str:
        p = ctx.params
        match node:
            case Atom(word):
                w = p.add(word, "text")
                return self._word_score(w, self._df(w, env), env)
            case Phrase(words):
                parts = []
                for word in words:
                    w = p.add(word, "text")
                    parts.append(self._word_score(w, self._df(w, env), env))
                return f"(case when {self._node(node, ctx)} then {' + '.join(parts)} else 0 end)"
            case Glob():
                matches = self._glob_words(node, ctx)
                return (f"(select coalesce(sum(catalog_okapi(catalog_word_count({self.json}, g.word), {env['len']}, "
                        f"{env['n']}, l.df, {env['mean']})), 0)::integer from unnest({matches}) g(word) "
                        f"join catalog_lexicon l on l.catalog_id = {env['cat']} and l.index_name = {self.key} "
                        f"and l.word = g.word where {self.json} ? g.word)")
            case And(children):
                parts = [self._score(c, ctx, env) for c in children if not isinstance(c, Not)]
                return f"(case when {self._node(node, ctx)} then {' + '.join(parts)} else 0 end)"
            case Or(children):
                return "(" + " + ".join(self._score(c, ctx, env) for c in children) + ")"
        raise QueryError(f"unsupported text query node {node!r}")

    def _glob_words(self, glob: Glob, ctx: QueryContext) -> str:
        p = ctx.params
        prefix = glob.prefix
        bounds = [f"l.word >= {p.add(prefix, 'text')}"]
        upper = _upper_bound(prefix)
        if upper is not None:
            bounds.append(f"l.word < {p.add(upper, 'text')}")
        like = glob.like_pattern
        if like is not None:
            bounds.append(f"l.word like {p.add(like, 'text')}")
        else:
            bounds.append(f"starts_with(l.word, {p.add(prefix, 'text')})")
        return (f"array(select l.word from catalog_lexicon l where l.catalog_id = "
                f"{p.add(ctx.catalog_id, 'integer')} and l.index_name = {self.key} and "
                f"{' and '.join(bounds)})")

    def cells_sql(self, row: str | None = "o") -> str:
        """The row's cells (``catalog_text_cells``), as the cells index holds them."""
        column = "text" if row is None else f"{row}.text"
        return f"catalog_text_cells({column}->{self.key})"

    def ddl(self, table: str) -> list[str]:
        return [f"create index if not exists {self.index_name(table, 't')} on {table} "
                f"using gin ((text->{self.key}))",
                f"create index if not exists {self.index_name(table, 'c')} on {table} "
                f"using gin ({self.cells_sql(None)})"]
