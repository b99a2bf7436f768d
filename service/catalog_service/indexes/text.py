"""ZCTextIndex with Plone's lexicon: documents stored as their word sequence (a JSON array).

Words come from ``catalog_service.text.index_words`` (Plone's splitter and accent-ignoring case
normaliser). A GIN index on the array answers words and globs (through the catalog's lexicon
table); phrases are checked on the sequence itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import QueryError
from ..planner.sql import all_of, any_of, quote_literal_name
from ..text import And, Atom, Glob, Not, Or, Phrase, index_words, parse_query, text_values
from .base import MISSING, BadValue, Index, IndexQuery, QueryContext


def _upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix`` (code point order)."""
    for i in range(len(prefix) - 1, -1, -1):
        code = ord(prefix[i])
        if code < 0x10FFFF and not 0xD7FF <= code < 0xE000:
            return prefix[:i] + chr(code + 1)
    return None


# Text indexes whose one-word relevance pages are read from score cells (docs/decisions/0007):
# Plone's full-text search. Other text indexes are scored over all their matches.
CELL_INDEXES = frozenset({"SearchableText"})
# The key, in a row's `text` document, of an index's cells (index names are identifiers, so no
# index is called this).
CELLS_SUFFIX = "#cells"


# A glob reads its best cells when it matches at most this many lexicon words; otherwise every
# match is scored.
MAX_GLOB_CELL_WORDS = 16
CELL_READ_FACTOR = 25
# The CTE of a statement over staged batches that holds the text of the rows they change: -1 for a
# committed row they hide, 1 for a row of theirs they show (QueryContext.ctes).
STAGED_TEXT = "staged_text"


@dataclass(frozen=True)
class BestCells:
    """CTEs ``leaf``, ``gate``, ``cell`` (word, token, n, upper, lower) and ``bound`` (score, terms,
    usable) of ``ZCTextIndex.best_cells``, and the row's cells as SQL. Having one of the query's
    cells is matching the query (one word, or one glob), so the text condition is not needed."""

    ctes: str
    row_cells: str


class ZCTextIndex(Index):
    type_name = "ZCTextIndex"
    query_options = ("query",)
    operators = ("or",)

    @property
    def has_cells(self) -> bool:
        return self.name in CELL_INDEXES

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
            "staged": None,
        }
        if ctx.overlay is not None:
            # Over staged batches, the statistics ZCatalog's OkapiIndex would have after indexing
            # them: the committed counts, less the hidden rows', plus the shown rows'. Those rows
            # are read once, into a CTE of the statement, which every statistic reads.
            env["staged"] = STAGED_TEXT
            ctx.ctes[STAGED_TEXT] = (f"select -1 as sign, h.text from {ctx.overlay.hidden} h "
                                     f"union all select 1, s.text from {ctx.overlay.shown} s")
            docs = self._overlaid(f"(select st.docs {stats})", "sum(r.sign)")
            words = self._overlaid(f"(select st.words {stats})", f"sum(r.sign * jsonb_array_length({self._words('r')}))")
            env["n"] = docs
            env["mean"] = f"({words}::float8 / nullif({docs}, 0))"
        return self._score(parse_query(text), ctx, env)

    def _words(self, row: str) -> str:
        """The row's word sequence, or null where it has none (so that no set function fails on a
        value that is not an array)."""
        return f"(case when jsonb_typeof({row}.text->{self.key}) = 'array' then {row}.text->{self.key} end)"

    def _overlaid(self, committed: str, aggregate: str, where: str = "true") -> str:
        """``committed`` (null: 0) plus ``aggregate`` over the rows of STAGED_TEXT (alias ``r``,
        ``r.sign`` -1 for a hidden row, 1 for a shown one) that have a word sequence and ``where``."""
        return (f"(coalesce({committed}, 0) + (select coalesce({aggregate}, 0) from {STAGED_TEXT} r "
                f"where {self._words('r')} is not null and {where}))")

    def best_cells(self, q: IndexQuery, ctx: QueryContext, want: Callable[[str], str]) -> BestCells | None:
        """SQL for the score cells that can hold the best documents of a one-word or one-glob query.

        A glob's score is the sum of the scores of the lexicon words it matches. If it is at least
        ``B``, one of its ``m`` terms is at least ``B / m``, ``m`` being the number of its words
        with documents (1 for a word). So every document scoring ``B`` or more has a cell whose
        highest score, times ``m``, is ``B`` or more. ``B`` is the highest score such that the cells
        whose every document scores ``B`` or more hold ``want(held)`` documents, ``held`` being the
        SQL of the documents holding the query's words (docs/decisions/0007)."""
        text = " ".join(q.keys)
        if not self.has_cells or not text:
            return None
        node = parse_query(text)
        if not isinstance(node, Atom | Glob):
            # Sums of several words' scores (And, Or, phrases) would get only the bound B / m over
            # all their words: measured at 1M demo objects, "garden OR museum" then read so many
            # cells that it took longer than scoring every match (docs/decisions/0007).
            return None
        p = ctx.params
        cat = p.add(ctx.catalog_id, "integer")
        if isinstance(node, Atom):
            words = f"array[{p.add(node.word, 'text')}]"
        else:
            words = self._glob_words(node, ctx, limit=MAX_GLOB_CELL_WORDS + 1)
        # The lexicon's words are "C"-collated; the cells index holds default-collated strings.
        cells = (f"select x.word, (x.fb || ':' || x.lb || ':' || x.word) collate \"default\" as token, "
                 f"x.n, "
                 f"catalog_okapi(catalog_text_bucket_hi(x.fb), catalog_text_bucket_lo(x.lb), st.docs, l.df, "
                 f"st.words::float8 / nullif(st.docs, 0)) as upper, "
                 f"catalog_okapi(catalog_text_bucket_lo(x.fb), catalog_text_bucket_hi(x.lb), st.docs, l.df, "
                 f"st.words::float8 / nullif(st.docs, 0)) as lower "
                 f"from catalog_text_stats st cross join leaf lf cross join lateral unnest(lf.words) w(word) "
                 f"join catalog_lexicon l on l.catalog_id = {cat} and l.index_name = {self.key} and l.word = w.word "
                 f"join catalog_text_cell x on x.catalog_id = {cat} and x.index_name = {self.key} "
                 f"and x.word = w.word where st.catalog_id = {cat} and st.index_name = {self.key}")
        # The cells index is built by `catalog-service migrate` for catalogs made before it: until
        # it is there and valid, reading the cells would scan the catalog.
        cells_index = f"'{self.index_name(ctx.table, 'c')}'"  # a checked identifier, as a literal
        gate = (f"select cardinality(lf.words) <= {MAX_GLOB_CELL_WORDS} and exists (select 1 from pg_index i "
                f"where i.indexrelid = to_regclass({cells_index}) and i.indisvalid) as usable from leaf lf")
        wanted = want("select coalesce(sum(c.n), 0) from cell c")
        score = (f"(select c.lower from (select lower, sum(n) over (order by lower desc) as reach from cell) c "
                 f"where c.reach >= {wanted} order by c.lower desc limit 1)")
        terms = "(select count(distinct word) from cell where n > 0)"
        # The documents the cut would read; over CELL_READ_FACTOR times the wanted ones (a glob of
        # many common words, whose bound B / m is low), scoring every match is cheaper.
        read = ("(select coalesce(sum(c.n), 0) from cell c, bound0 b "
                "where b.score is null or c.upper * b.terms >= b.score)")
        ctes = (f"leaf as materialized (select {words} as words), "
                f"gate as materialized ({gate}), "
                f"cell as materialized ({cells} and (select usable from gate)), "
                f"bound0 as materialized (select {score} as score, {terms} as terms), "
                f"bound as materialized (select b.score, b.terms, (select usable from gate) "
                f"and {read} <= {CELL_READ_FACTOR} * {wanted} as usable from bound0 b)")
        return BestCells(ctes=ctes, row_cells=self.cells_sql())

    def _word_score(self, word_sql: str, df_sql: str, env: dict) -> str:
        return (f"catalog_okapi(catalog_word_count({self.json}, {word_sql}), {env['len']}, {env['n']}, "
                f"{df_sql}, {env['mean']})")

    def _df(self, word_sql: str, env: dict) -> str:
        committed = (f"(select l.df from catalog_lexicon l where l.catalog_id = {env['cat']} "
                     f"and l.index_name = {self.key} and l.word = {word_sql})")
        if env["staged"] is None:
            return committed
        return self._overlaid(committed, "sum(r.sign)", f"(r.text->{self.key} ? {word_sql})")

    def _df_changes(self, words_sql: str) -> str:
        """How the staged batches change the document frequency of each of ``words_sql`` (a text
        array), as a JSON object word -> change, in one read of STAGED_TEXT (not one per word)."""
        return (f"(select coalesce(jsonb_object_agg(d.word, d.n), '{{}}') from (select w.word, sum(r.sign) as n "
                f"from {STAGED_TEXT} r, lateral (select distinct e collate \"C\" as word "
                f"from jsonb_array_elements_text({self._words('r')}) e) w where w.word = any({words_sql}) "
                f"group by w.word) d)")

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
                matches = self._glob_words(node, ctx, shown=env["staged"] and f"(select * from {STAGED_TEXT} where sign = 1)")
                if env["staged"] is None:
                    return (f"(select coalesce(sum(catalog_okapi(catalog_word_count({self.json}, g.word), "
                            f"{env['len']}, {env['n']}, l.df, {env['mean']})), 0)::integer from unnest({matches}) "
                            f"g(word) join catalog_lexicon l on l.catalog_id = {env['cat']} "
                            f"and l.index_name = {self.key} and l.word = g.word where {self.json} ? g.word)")
                # Words only the staged rows hold are in no committed lexicon row. The changes are
                # one InitPlan for the statement, not a read per result row.
                changes = self._df_changes(matches)
                df = f"(coalesce(l.df, 0) + coalesce(({changes} ->> g.word)::bigint, 0))"
                return (f"(select coalesce(sum(catalog_okapi(catalog_word_count({self.json}, g.word), "
                        f"{env['len']}, {env['n']}, {df}, {env['mean']})), 0)::integer from unnest({matches}) "
                        f"g(word) left join catalog_lexicon l on l.catalog_id = {env['cat']} "
                        f"and l.index_name = {self.key} and l.word = g.word where {self.json} ? g.word)")
            case And(children):
                parts = [self._score(c, ctx, env) for c in children if not isinstance(c, Not)]
                return f"(case when {self._node(node, ctx)} then {' + '.join(parts)} else 0 end)"
            case Or(children):
                return "(" + " + ".join(self._score(c, ctx, env) for c in children) + ")"
        raise QueryError(f"unsupported text query node {node!r}")

    def glob_words_sql(self, glob: Glob, ctx: QueryContext, limit: int) -> str:
        """The committed lexicon words ``glob`` matches, at most ``limit``, as a text array (the
        planner counts them against the cost bounds of a public search)."""
        return self._glob_words(glob, ctx, limit=limit)

    def _glob_words(self, glob: Glob, ctx: QueryContext, limit: int | None = None, shown: str | None = None) -> str:
        """The lexicon words ``glob`` matches, as a text array. Over staged batches, the words of
        their shown rows (``shown`` if given, a subquery with a ``text`` column) too: ZCatalog's
        lexicon has them as soon as they are indexed. (The
        words of rows they hide are in the committed lexicon, which, like ZCatalog's, forgets no
        word; a word no document holds adds nothing.)"""
        p = ctx.params
        prefix = glob.prefix

        def bounds(word: str) -> str:
            found = [f"{word} >= {p.add(prefix, 'text')}"]
            upper = _upper_bound(prefix)
            if upper is not None:
                found.append(f"{word} < {p.add(upper, 'text')}")
            like = glob.like_pattern
            if like is not None:
                found.append(f"{word} like {p.add(like, 'text')}")
            else:
                found.append(f"starts_with({word}, {p.add(prefix, 'text')})")
            return " and ".join(found)

        committed = bounds("l.word")
        words = (f"select l.word from catalog_lexicon l where l.catalog_id = "
                 f"{p.add(ctx.catalog_id, 'integer')} and l.index_name = {self.key} and {committed}")
        if ctx.overlay is not None:
            # "C"-collated as the lexicon's words, so that the bounds compare the same way.
            words += (f" union select w.word from {shown or ctx.overlay.shown} r, lateral (select e collate \"C\" as word "
                      f"from jsonb_array_elements_text({self._words('r')}) e) w where {bounds('w.word')}")
        return f"array({words}{'' if limit is None else f' limit {int(limit)}'})"

    def cells_sql(self, row: str | None = "o") -> str:
        """The row's cells: a JSON array the batch code stores next to the words (text/cells.py),
        as ``catalog_text_cells`` would compute them from the words."""
        column = "text" if row is None else f"{row}.text"
        literal = quote_literal_name(self.name)  # a checked identifier, quoted
        return f"({column}->'{literal[1:-1]}{CELLS_SUFFIX}')"

    def ddl(self, table: str) -> list[str]:
        found = [f"create index if not exists {self.index_name(table, 't')} on {table} "
                 f"using gin ((text->{self.key}))"]
        if self.has_cells:
            found.append(f"create index if not exists {self.index_name(table, 'c')} on {table} "
                         f"using gin ({self.cells_sql(None)})")
        return found
