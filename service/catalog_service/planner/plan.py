"""Plan a search: (ZCatalog query, catalog schema, limits, security) -> SQL text and parameters.

Mirrors ``Products.ZCatalog.Catalog.searchResults``: each index named in the query contributes a
condition (``indexes/``), the conditions intersect, ``sort_on``/``sort_order``/``sort_limit`` and
``b_start``/``b_size`` shape the page. The SQL text depends only on the query's shape; values are
parameters. Security conditions come from ``Security``, which the API layer builds from the
caller's credential, never from the query.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import Any

from ..errors import Forbidden, LimitExceeded, QueryError
from ..indexes import Index, IndexQuery, QueryContext, RowsOverlay
from ..indexes.simple import DateRangeIndex
from ..indexes.text import ZCTextIndex
from ..text import And, Atom, Glob, Not, Or, Phrase, parse_query
from .sql import Params, all_of

# Query keys that are not index names (ZCatalog reads them from the same mapping).
RESERVED = frozenset({
    "sort_on", "sort_order", "sort_limit", "sort-on", "sort-order", "sort-limit",
    "b_start", "b_size",
})
SECURITY_INDEX = "allowedRolesAndUsers"
EFFECTIVE_INDEX = "effectiveRange"


@dataclass(frozen=True)
class CatalogSchema:
    catalog_id: int
    table: str
    indexes: dict[str, Index]
    metadata: tuple[str, ...] = ()


@dataclass(frozen=True)
class Limits:
    max_b_size: int = 5000
    max_unbatched: int = 100000
    max_list_length: int = 1000
    max_text_length: int = 1000
    max_query_terms: int = 64
    # Relevance order of a SearchableText query from its words' best score cells (decision 0007):
    # used for pages ending at most ``relevance_top`` results in (0: never), reading the cells
    # that hold at least ``relevance_candidates`` documents plus four per result asked for.
    relevance_top: int = 1000
    relevance_candidates: int = 100
    # That page's statement runs with a generic plan, kept per connection (store/search.py).
    relevance_generic_plan: bool = True
    # Facet counts (planner/facets.py): facets per search, values listed per facet.
    max_facets: int = 16
    max_facet_values: int = 1000
    # Cost bounds of the callers without the service credential (api.deps.limits_for), None for
    # the others: words of a text query, its globs, the lexicon words one glob may match.
    max_text_terms: int | None = None
    max_globs: int | None = None
    max_glob_words: int | None = None


@dataclass(frozen=True)
class Security:
    """Who is asking. ``principals`` None means unrestricted (the connector's
    unrestrictedSearchResults); ``effective_at`` None means inactive content is included.
    ``scope``: a scoped key's filter (a query of index conditions, planner/scope.py): the caller
    sees the catalog as if it held only the objects the filter selects."""

    principals: tuple[str, ...] | None
    effective_at: datetime | None
    scope: dict[str, Any] | None = field(default=None, hash=False)


UNRESTRICTED = Security(principals=None, effective_at=None)


@dataclass
class SearchPlan:
    sql: str
    params: list[Any]
    # The total; it uses only the first parameters of ``params``, so it runs in the same statement.
    count_sql: str
    b_start: int
    b_size: int | None
    empty: bool = False
    ignored: list[str] = field(default_factory=list)
    # A query error ZCatalog raises only if the indexes before it found something: check that
    # with precheck_sql; if nothing matches, the answer is empty instead.
    deferred_error: QueryError | None = None
    # A relevance page read from score cells (docs/decisions/0007) also comes as the plain query,
    # which the executor may run instead when the query is known to have fewer than
    # ``plain_below`` results: the cells' statement then only adds planning time.
    plain_sql: str = ""
    plain_below: int = 0
    precheck_sql: str = ""
    precheck_params: list[Any] = field(default_factory=list)
    # With Limits.max_glob_words: a statement answering the most lexicon words one of the query's
    # globs matches (counted up to one past the limit), run before the search.
    expansion_sql: str = ""
    expansion_params: list[Any] = field(default_factory=list)
    # A sorted query paged by sort_limit alone from a b_start: ZCatalog keeps only the first
    # ``sort_limit_stop`` results, then starts at b_start, unless b_start lies past half of the
    # total (then it sorts in reverse and gives sort_limit results from b_start). The page's SQL
    # reads the longer slice; the executor cuts it once the total is known (first_half_page).
    sort_limit_stop: int | None = None
    # ZCatalog's score: the text indexes' scores (the SQL's ``score``, which the page is ordered
    # by) times ``score_factor`` plus ``score_offset`` (zcatalog_score).
    score_factor: int = 1
    score_offset: int = 0
    # The index in ``params`` of the result's total as last counted, for a page from score cells
    # (None: no such parameter). The executor sets it when it knows one (its value is null
    # otherwise): the share of the words' documents the other criteria keep scales the documents
    # the cells must hold (docs/decisions/0007).
    known_total_param: int | None = None

    def zcatalog_score(self, score: int | None) -> int | None:
        return None if score is None else score * self.score_factor + self.score_offset

    def first_half_page(self, rows: list, total: int) -> list:
        """``rows`` as ZCatalog's sorted page, given the total (Catalog.sortResults)."""
        if self.sort_limit_stop is None or self.b_start > total / 2:
            return rows
        return rows[:max(0, self.sort_limit_stop - self.b_start)]


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _int_option(query: dict, name: str, default: int | None) -> int | None:
    value = query.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool):
        raise QueryError(f"{name} must be an integer")
    try:
        number = int(value)
    except (TypeError, ValueError) as exc:
        raise QueryError(f"{name} must be an integer, got {value!r}") from exc
    if number < 0:
        raise QueryError(f"{name} must not be negative")
    return number


def parse_index_query(query: dict, index: Index) -> IndexQuery:
    """ZCatalog's IndexQuery: keys from ``query``, options validated against the index's own."""
    name = index.name
    param = query[name]
    options: dict[str, Any] = {}
    from_list = False
    if isinstance(param, dict):
        raw = param.get("query", ())
        keys = list(raw) if isinstance(raw, list | tuple) else [raw]
        for option, value in param.items():
            if option != "query":
                options[option] = value
    else:
        if isinstance(param, list | tuple):
            keys, from_list = list(param), True
        else:
            keys = [param]
        # Old-style options: {"path": "/a", "path_depth": 1}.
        prefix = name + "_"
        for field_name, value in query.items():
            if field_name.startswith(prefix) and field_name not in RESERVED:
                options[field_name[len(prefix):]] = value
    for option in options:
        if index.checks_options and option not in index.query_options:
            raise QueryError(f"index {name!r}: option {option!r} is not valid")
    operator = index.default_operator
    if "operator" in options and index.checks_options:
        operator = options.pop("operator")
        if not isinstance(operator, str) or operator.lower() not in index.operators:
            raise QueryError(f"index {name!r}: operator {operator!r} is not valid")
        operator = operator.lower()
    if "not" in options and options["not"] is not None:
        options["not"] = _as_list(options["not"])
    return IndexQuery(name=name, keys=keys, operator=operator, options=options, from_list=from_list)


def _check_sizes(value: Any, limits: Limits, where: str, depth: int = 0) -> None:
    if depth > 4:
        raise LimitExceeded(f"{where}: query nested too deeply")
    if isinstance(value, list | tuple):
        if len(value) > limits.max_list_length:
            raise LimitExceeded(f"{where}: {len(value)} values, at most {limits.max_list_length} allowed")
        for item in value:
            _check_sizes(item, limits, where, depth + 1)
    elif isinstance(value, dict):
        if len(value) > 16:
            raise LimitExceeded(f"{where}: too many options")
        for item in value.values():
            _check_sizes(item, limits, where, depth + 1)
    elif isinstance(value, str) and len(value) > limits.max_text_length:
        raise LimitExceeded(f"{where}: a value of {len(value)} characters, at most {limits.max_text_length} allowed")


def _text_terms(node) -> tuple[int, list[Glob]]:
    """The words of a parsed text query (a phrase's each), and its globs."""
    match node:
        case Atom():
            return 1, []
        case Phrase(words):
            return len(words), []
        case Glob():
            return 1, [node]
        case Not(child):
            return _text_terms(child)
        case And(children) | Or(children):
            words, globs = 0, []
            for child in children:
                n, g = _text_terms(child)
                words, globs = words + n, globs + g
            return words, globs
    raise TypeError(f"not a text query node: {node!r}")


def _text_cost(query: dict, schema: CatalogSchema, names: list[str], limits: Limits, source: str
               ) -> tuple[str, list[Any]]:
    """Refuse text queries past the cost bounds of ``limits`` (LimitExceeded, 422), and return the
    statement that counts the globs' expansions (``SearchPlan.expansion_sql``), if any."""
    if limits.max_text_terms is None and limits.max_globs is None and limits.max_glob_words is None:
        return "", []
    expansions = []
    params = Params()
    ctx = QueryContext(params=params, catalog_id=schema.catalog_id, table=source)
    for name in names:
        index = schema.indexes[name]
        if not isinstance(index, ZCTextIndex):
            continue
        keys = parse_index_query(query, index).keys
        text = " ".join(k for k in keys if isinstance(k, str))
        try:
            tree = parse_query(text) if text else None
        except QueryError:
            continue  # refused as ZCatalog refuses it, by the index's condition
        if tree is None:
            continue
        words, globs = _text_terms(tree)
        if limits.max_text_terms is not None and words > limits.max_text_terms:
            raise LimitExceeded(f"{name}: {words} words, at most {limits.max_text_terms} in a search without the "
                                f"service credential")
        if limits.max_globs is not None and len(globs) > limits.max_globs:
            raise LimitExceeded(f"{name}: {len(globs)} words with '*' or '?', at most {limits.max_globs} in a "
                                f"search without the service credential")
        if limits.max_glob_words is not None:
            expansions += [f"cardinality({index.glob_words_sql(g, ctx, limits.max_glob_words + 1)})"
                           for g in dict.fromkeys(globs)]
    if not expansions:
        return "", []
    return f"select greatest({', '.join(expansions)})", list(params.values)


def _sort_spec(query: dict, schema: CatalogSchema) -> list[tuple[Index, bool]]:
    names = query.get("sort-on", query.get("sort_on"))
    if names is None:
        return []
    names = _as_list(names)
    if not names or len(names) > 8:
        raise QueryError("sort_on takes one to eight index names")
    indexes = []
    for name in names:
        if not isinstance(name, str) or name not in schema.indexes:
            raise QueryError(f"Unknown sort_on index: {name!r}")
        indexes.append(schema.indexes[name])
    order = query.get("sort-order", query.get("sort_order"))
    orders = [""] if order is None else _as_list(order)
    if not orders:
        raise QueryError("sort_order is empty: give one order, or one per sort_on index")
    if not all(isinstance(o, str) for o in orders):
        raise QueryError("sort_order takes strings")
    reverse = [o.lower() in ("reverse", "descending") for o in orders]
    # ZCatalog: one order applies to every key; with several, keys without one follow the first.
    spec = [reverse[i] if i < len(reverse) else reverse[0] for i in range(len(indexes))]
    return list(zip(indexes, spec, strict=True))


def application_order(names: list[str], schema: CatalogSchema) -> list[str]:
    """The order ZCatalog applies indexes in: unlimited-result indexes (text) first, then by name."""
    return sorted(names, key=lambda n: (not isinstance(schema.indexes[n], ZCTextIndex), n))


@dataclass
class Selection:
    """The conditions a query selects its rows by, in ZCatalog's order of application."""

    conditions: list[str]
    ctx: QueryContext
    source: str
    index_names: list[str]
    ignored: list[str]
    applied: list[str]
    text_conditions: dict[str, str]
    score_factor: int = 1
    score_offset: int = 0
    # An invalid index part that ZCatalog reports only if the indexes before it found something:
    # ``probe`` is the SQL test of that, which uses the first ``probe_params`` parameters.
    deferred_error: QueryError | None = None
    probe: str = ""
    probe_params: int = 0


def queried_indexes(query: dict[str, Any], schema: CatalogSchema, limits: Limits) -> tuple[list[str], list[str]]:
    """The index names of ``query`` (sizes checked) and its keys that name no index."""
    index_names = []
    ignored = []
    for key, value in query.items():
        if key in RESERVED:
            continue
        if key in schema.indexes:
            _check_sizes(value, limits, key)
            index_names.append(key)
        else:
            ignored.append(key)
    if len(index_names) > limits.max_query_terms:
        raise LimitExceeded(f"{len(index_names)} indexes queried, at most {limits.max_query_terms}")
    return index_names, ignored


def select_rows(
    query: dict[str, Any],
    schema: CatalogSchema,
    limits: Limits,
    security: Security,
    params: Params,
    overlay: RowsOverlay,
    batch_ids: list[str] | tuple[str, ...] = (),
    also_applied: tuple[str, ...] = (),
    queried: tuple[list[str], list[str]] | None = None,
) -> Selection:
    """The conditions of ``query`` over ``overlay.source`` with the caller's security, their
    values added to ``params``. ``also_applied`` names indexes that count as applied (ZCatalog's
    order of application and its "first index" rules see them) without adding a condition: a
    facet's own index, whose values the facet groups by (planner/facets.py)."""
    source = overlay.source
    index_names, ignored = queried if queried is not None else queried_indexes(query, schema, limits)
    for key, value in query.items():
        # Catalog.make_query sorts every list in the query, whatever its key: mixed types raise.
        if isinstance(value, list | tuple):
            try:
                sorted(value)
            except TypeError as exc:
                raise QueryError(f"{key}: the values of a list must be comparable (ZCatalog sorts "
                                 f"them): {value!r}") from exc

    applied = list(index_names) + [n for n in also_applied if n not in index_names]
    if security.principals is not None and SECURITY_INDEX not in applied:
        applied.append(SECURITY_INDEX)
    effective = schema.indexes.get(EFFECTIVE_INDEX)
    if security.effective_at is not None and isinstance(effective, DateRangeIndex) and EFFECTIVE_INDEX not in applied:
        applied.append(EFFECTIVE_INDEX)
    # The caller's security conditions, with their parameters first: every condition that looks at
    # other rows than the result row (existence probes, the deferred-error precheck) applies them
    # too, so no answer depends on objects the caller cannot see.
    principals_p = None if security.principals is None else params.add(list(security.principals), "text[]")
    effective_p = None
    if security.effective_at is not None and isinstance(effective, DateRangeIndex):
        effective_p = params.add(effective.term(security.effective_at), "bigint")

    def principals_on(row: str) -> str:
        return f"({row}.allowed && {principals_p})"

    def effective_on(row: str) -> str:
        return effective.covers(effective_p, row=f"{row}.")

    # A scoped key's filter is part of what the caller may see: its conditions (planned with the
    # caller's security, their parameters next) apply to the result row, and to every other row a
    # condition looks at, so that no answer depends on objects outside the filter.
    scoped = _scope_conditions(security, schema, limits, params, overlay)

    def visible(row: str) -> list[str]:
        return ([principals_on(row)] if principals_p is not None else []) + (
            [effective_on(row)] if effective_p is not None else []) + scoped.on(row)

    ctx = QueryContext(params=params, catalog_id=schema.catalog_id, table=source,
                       applied=application_order([n for n in applied if n in schema.indexes], schema),
                       visible=visible, overlay=overlay if batch_ids else None)
    selection = Selection(conditions=[], ctx=ctx, source=source, index_names=index_names, ignored=ignored,
                          applied=applied, text_conditions={})

    def conditions_of(name: str) -> list[str]:
        found = []
        if name in index_names:
            index = schema.indexes[name]
            iq = parse_index_query(query, index)
            if name == SECURITY_INDEX:
                found.append(_principals_condition(iq, params))
            else:
                found.append(index.condition(iq, ctx))
                if isinstance(index, ZCTextIndex):
                    selection.text_conditions[name] = found[-1]
        if name == SECURITY_INDEX and principals_p is not None:
            found.append(principals_on("o"))
        if name == EFFECTIVE_INDEX and effective_p is not None:
            found.append(effective_on("o"))
        return found

    # In ZCatalog's order: an index whose query is invalid raises only if the indexes applied
    # before it left some result (Catalog.search stops at the first empty one).
    conditions = selection.conditions
    order = ctx.applied + [n for n in (SECURITY_INDEX, EFFECTIVE_INDEX) if n not in ctx.applied]
    # Catalog.search intersects each index's answer with the result so far, text indexes first:
    # weightedIntersection adds their scores, and adds 1 for an index answering a set (its
    # members weigh 1); a DateRangeIndex answers the result so far minus what it excludes, scores
    # kept, so the sum doubles them.
    for name in order:
        used = len(params.values)
        try:
            found = conditions_of(name)
            conditions.extend(found)
            index = schema.indexes.get(name)
            if found and isinstance(index, DateRangeIndex):
                selection.score_factor, selection.score_offset = 2 * selection.score_factor, 2 * selection.score_offset
            elif found and not isinstance(index, ZCTextIndex):
                selection.score_offset += 1
        except QueryError as exc:
            if not conditions:
                raise
            # Only the parameters of the conditions before this one (it may have added some). The
            # caller's security applies whatever the order: ZCatalog would probe invisible objects.
            probe = conditions + [c for c in visible("o") if c not in conditions]
            selection.deferred_error = exc
            selection.probe = f"select exists (select 1 from {source} o where {all_of(probe)})"
            selection.probe_params = used
            return selection
    # After the query's own conditions: ZCatalog's "first index" rules see the query alone, as in a
    # catalog that holds only the filter's objects.
    conditions.extend(scoped.on("o"))
    return selection


@dataclass(frozen=True)
class ScopeConditions:
    """A scoped key's filter as SQL conditions on the result row ``o`` (``conditions``), and on
    another row of ``source`` as a test of its rid."""

    conditions: tuple[str, ...] = ()
    source: str = ""

    def on(self, row: str) -> list[str]:
        if not self.conditions:
            return []
        if row == "o":
            return list(self.conditions)
        # The subquery's own ``o`` is the row the conditions test.
        return [f"({row}.rid in (select o.rid from {self.source} o where {all_of(list(self.conditions))}))"]


def _scope_conditions(security: Security, schema: CatalogSchema, limits: Limits, params: Params,
                      overlay: RowsOverlay) -> ScopeConditions:
    """The conditions of ``security.scope``, planned as a query with the caller's security (its
    rows are the objects the filter finds for the key's principals). A filter the catalog can no
    longer apply (an index removed or redeclared since the key was made) refuses the search with
    403: a filter left out would widen what the key sees."""
    if security.scope is None:
        return ScopeConditions()
    missing = sorted(name for name in security.scope if name not in schema.indexes)
    if missing:
        raise Forbidden(f"the key's filter names {', '.join(map(repr, missing))}, which the catalog no longer has: "
                        f"the key cannot search until it is replaced")
    try:
        # The filter's conditions repeat the caller's security ones (with parameters of their own,
        # which its probes of other rows use too): cheap, evaluated on the rows the indexes find.
        scoped = select_rows(security.scope, schema, limits, replace(security, scope=None), params, overlay)
        if scoped.deferred_error is not None:
            raise scoped.deferred_error
    except QueryError as exc:
        raise Forbidden(f"the key's filter cannot be applied to the catalog's indexes: {exc.detail}") from exc
    return ScopeConditions(conditions=tuple(scoped.conditions), source=overlay.source)


def plan_search(
    query: dict[str, Any],
    schema: CatalogSchema,
    limits: Limits,
    security: Security,
    batch_ids: list[str] | tuple[str, ...] = (),
    metadata: list[str] | None = None,
    b_start: int | None = None,
    b_size: int | None = None,
) -> SearchPlan:
    """The plan of one search, in the steps below. Each step adds its values to the one ``Params``
    in turn, so their order is the parameters' order: the rows' selection (the count uses only
    those), the relevance score, the metadata names, the page's limit and offset, then the best
    cells' bound. It is also the order in which a query's errors are found (the first raises)."""
    selected = _select(query, schema, limits, security, batch_ids)
    if selected.selection.deferred_error is not None:
        return _deferred_plan(selected)
    rows = _sorted_rows(selected)
    relevance = _relevance(query, schema, selected, rows)
    batch = _batch(query, limits, selected.sort, b_start, b_size)
    page = _page(selected, rows, relevance, batch, metadata)
    sql, plain_sql, plain_below, known_total_param = _best_cells_page(query, schema, limits, selected, rows,
                                                                      relevance, batch, page, batch_ids)
    selection = selected.selection
    return SearchPlan(sql=sql, params=selected.params.values, count_sql=rows.count_sql,
                      b_start=batch.start, b_size=batch.size, empty=not selection.applied,
                      ignored=selection.ignored, plain_sql=plain_sql, plain_below=plain_below,
                      sort_limit_stop=batch.sort_limit_stop,
                      score_factor=selection.score_factor, score_offset=selection.score_offset,
                      expansion_sql=selected.expansion_sql, expansion_params=selected.expansion_params,
                      known_total_param=known_total_param)


@dataclass(frozen=True)
class _Selected:
    """The query parsed and its rows selected: what every later step of plan_search reads."""

    params: Params
    source: str
    sort: list[tuple[Index, bool]]
    selection: Selection
    expansion_sql: str
    expansion_params: list[Any]


def _select(query: Any, schema: CatalogSchema, limits: Limits, security: Security,
            batch_ids: list[str] | tuple[str, ...]) -> _Selected:
    """Decides which rows the query selects: the rows source (with staged batches, the overlay),
    the queried indexes (sizes checked), the text cost bounds and their glob expansion statement,
    the sort indexes and orders, and the conditions of the query and of the caller's security."""
    if not isinstance(query, dict):
        raise QueryError("a query is a mapping of index names to values")
    params = Params()
    overlay = rows_overlay(schema, batch_ids, params)
    queried = queried_indexes(query, schema, limits)
    expansion_sql, expansion_params = _text_cost(query, schema, queried[0], limits, overlay.source)
    sort = _sort_spec(query, schema)  # ZCatalog reads sort_on and sort_order first (searchResults)
    selection = select_rows(query, schema, limits, security, params, overlay, batch_ids, queried=queried)
    return _Selected(params=params, source=overlay.source, sort=sort, selection=selection,
                     expansion_sql=expansion_sql, expansion_params=expansion_params)


def _deferred_plan(selected: _Selected) -> SearchPlan:
    """Decides the plan of a query with a deferred error: no page, only the precheck (do the
    indexes before the invalid one find something?) and the glob expansion statement."""
    selection = selected.selection
    return SearchPlan(sql="", params=[], count_sql="", b_start=0, b_size=None,
                      deferred_error=selection.deferred_error, precheck_sql=selection.probe,
                      precheck_params=list(selected.params.values[:selection.probe_params]),
                      expansion_sql=selected.expansion_sql, expansion_params=selected.expansion_params)


@dataclass(frozen=True)
class _Rows:
    """The rows the page and the total are read from, and the sort_on terms of their order."""

    conditions: list[str]
    sort_terms: list[str]
    where: str
    count_sql: str


def _sorted_rows(selected: _Selected) -> _Rows:
    """Decides the sort_on terms and the count: a sort key's expression must not be null (ZCatalog
    drops objects without a sort key), and the count counts the rows of every condition. It adds
    no parameters: the count uses those of the selection."""
    conditions = list(selected.selection.conditions)
    sort_terms = []
    for index, desc in selected.sort:
        expr = index.sort_expr()
        conditions.append(f"({expr}) is not null")  # ZCatalog drops objects without a sort key
        sort_terms.append(f"{expr} {'desc' if desc else 'asc'}")
    # The count uses the conditions only: its parameters are those added so far.
    where = all_of(conditions)
    count_sql = f"select count(*) from {selected.source} o where {where}"
    return _Rows(conditions=conditions, sort_terms=sort_terms, where=where, count_sql=count_sql)


@dataclass(frozen=True)
class _Relevance:
    """The page's ``score`` column, the text indexes it sums, and the page's whole order."""

    score_sql: str
    scored: list[str]
    order_terms: list[str]


def _relevance(query: dict[str, Any], schema: CatalogSchema, selected: _Selected, rows: _Rows) -> _Relevance:
    """Decides the relevance score and the page's order: without sort_on, a text query orders by
    the sum of its text indexes' scores (ZCatalog: score, then higher rid); otherwise the score is
    null and the sort_on terms order. Either way the rid breaks ties, in the first term's
    direction."""
    sort = selected.sort
    order_terms = list(rows.sort_terms)
    score_sql = "null::integer"
    scored: list[str] = []
    if not sort:
        scores = []
        for name in selected.selection.index_names:
            index = schema.indexes[name]
            if isinstance(index, ZCTextIndex):
                score = index.score(parse_index_query(query, index), selected.selection.ctx)
                if score is not None:
                    scores.append(score)
                    scored.append(name)
        if scores:
            score_sql = "(" + " + ".join(scores) + ")"
            order_terms.insert(0, "score desc")
    first_desc = sort[0][1] if sort else score_sql != "null::integer"
    order_terms.append(f"o.rid {'desc' if first_desc else 'asc'}")
    return _Relevance(score_sql=score_sql, scored=scored, order_terms=order_terms)


@dataclass(frozen=True)
class _Batch:
    """The page's bounds: ``size`` (SearchPlan.b_size, None: unbatched), ``start``, the rows the
    page's SQL reads (``limit``), and SearchPlan.sort_limit_stop."""

    size: int | None
    start: int
    limit: int
    sort_limit_stop: int | None


def _batch(query: dict[str, Any], limits: Limits, sort: list[tuple[Index, bool]], b_start: int | None,
           b_size: int | None) -> _Batch:
    """Decides the batch size and start, as ZCatalog reads b_size, sort_limit and b_start (the
    arguments override the query's), and refuses those past ``limits``."""
    size = b_size if b_size is not None else _int_option(query, "b_size", None)
    sort_limit = _int_option(query, "sort-limit", None)
    if sort_limit is None:
        sort_limit = _int_option(query, "sort_limit", None)
    sort_limit_stop = None
    if size is None and sort_limit:
        size = sort_limit
        if sort:
            sort_limit_stop = sort_limit
    # ZCatalog reads b_start always but slices only with a batch size: alone it changes nothing.
    query_start = _int_option(query, "b_start", 0)
    start = b_start if b_start is not None else (query_start if size is not None else 0)
    if size == 0 and len(sort) == 1 and b_size is None:
        raise QueryError("b_size 0 with sort_on fails in ZCatalog; ask for at least one item")
    if size is not None and size > limits.max_b_size:
        raise LimitExceeded(f"b_size {size} is larger than the maximum {limits.max_b_size}")
    limit = size if size is not None else limits.max_unbatched
    return _Batch(size=size, start=start, limit=limit, sort_limit_stop=sort_limit_stop if start else None)


def _meta_text(alias: str, wanted: str | None) -> str:
    """The page's metadata as JSON text, of every column (``wanted`` None) or of those the
    parameter ``wanted`` names."""
    if wanted is None:
        return f"{alias}.meta::text"
    return (f"(select coalesce(jsonb_object_agg(k, {alias}.meta->k), '{{}}') from "
            f"unnest({wanted}) k where {alias}.meta ? k)::text")


@dataclass(frozen=True)
class _Page:
    """The page's statement, and the parameters it shares with the best cells' variant: the
    metadata names (None: every column), the limit and the offset."""

    sql: str
    wanted: str | None
    limit_p: str
    offset_p: str


def _page(selected: _Selected, rows: _Rows, relevance: _Relevance, batch: _Batch,
          metadata: list[str] | None) -> _Page:
    """Decides the page's SQL: the ordered, limited rows, then their metadata text."""
    params = selected.params
    wanted = params.add(list(metadata), "text[]") if metadata is not None else None
    limit_p = params.add(batch.limit, "bigint")
    offset_p = params.add(batch.start, "bigint")
    # The page alone: ORDER BY + LIMIT can walk a sort index and stop early. The total is
    # count_sql. The metadata text is made outside the ordered query, for the rows of the page
    # only: in it, a top-N sort would compute it for every row it sorts (a Plone row's metadata,
    # 1.3 kB of JSON, for 500 matches of a 20-row page: 11 of 15 ms).
    # Only scores add CTEs (text statistics over staged batches), and only the page has scores.
    ctes = "".join(f"{name} as materialized ({body}), " for name, body in selected.selection.ctx.ctes.items())
    ordered = (f"select o.rid, o.uid, o.path, o.meta, {relevance.score_sql} as score "
               f"from {selected.source} o where {rows.where} order by {', '.join(relevance.order_terms)} "
               f"limit {limit_p} offset {offset_p}")
    sql = (f"{'with ' + ctes[:-2] + ' ' if ctes else ''}"
           f"select p.rid, p.uid, p.path, {_meta_text('p', wanted)} as meta, p.score from ({ordered}) p")
    return _Page(sql=sql, wanted=wanted, limit_p=limit_p, offset_p=offset_p)


# The documents the best cells must hold per result asked for (_cells_wanted): at least four, at
# most forty.
CELLS_PER_RESULT = (4, 40)


def _cells_wanted(page: _Page, candidates: int, params: Params, added: list[int], held: str) -> str:
    """The documents the best cells must hold: per result asked for, four, or twice the share of
    the words' documents per result (``held``, SQL: the documents holding the query's words, over
    the result's total as last counted, a null parameter until the executor knows it) when that
    is more, up to CELLS_PER_RESULT; plus ``candidates`` (Limits.relevance_candidates). Where the
    other criteria keep one document in nine of the word's (a type chosen in a facet, say), the
    cells' best documents are mostly not results, and four per result would not settle the page.
    The page is exact either way: only the reading can be wasted, or fall back to the whole
    query. The parameters are added only when the index asks (the total's position in ``added``)."""
    cand = params.add(candidates, "bigint")
    known = params.add(None, "bigint")
    added.append(len(params.values) - 1)
    low, high = CELLS_PER_RESULT
    per_result = f"greatest({low}, least({high}, 2 * coalesce(({held})::float8 / nullif({known}, 0), 0)))"
    return f"({page.limit_p} + {page.offset_p}) * {per_result} + {cand}"


def _best_cells_page(query: dict[str, Any], schema: CatalogSchema, limits: Limits, selected: _Selected,
                     rows: _Rows, relevance: _Relevance, batch: _Batch, page: _Page,
                     batch_ids: list[str] | tuple[str, ...]) -> tuple[str, str, int, int | None]:
    """Decides whether the page is read from its text index's best cells (docs/decisions/0007): a
    relevance page of one scored index, without staged batches, ending at most
    Limits.relevance_top results in, whose index has cells for the query. Returns (sql, plain_sql,
    plain_below, known_total_param): with cells, the cells' statement, the plain page as
    SearchPlan.plain_sql and the position of the known total's parameter; without, the plain page,
    "", 0 and None."""
    scored = relevance.scored
    if not (len(scored) == 1 and not batch_ids and batch.limit > 0
            and batch.start + batch.limit <= limits.relevance_top):
        return page.sql, "", 0, None
    index = schema.indexes[scored[0]]
    params = selected.params
    added: list[int] = []
    cells = index.best_cells(parse_index_query(query, index), selected.selection.ctx,
                             partial(_cells_wanted, page, limits.relevance_candidates, params, added))
    if cells is None:
        return page.sql, "", 0, None
    text_condition = selected.selection.text_conditions[scored[0]]
    best_where = all_of([c for c in rows.conditions if c != text_condition])
    sql = _from_best_cells(page.sql, cells, best_where, selected.source, page.wanted, relevance.score_sql,
                           page.limit_p, page.offset_p)
    return sql, page.sql, 4 * (batch.start + batch.limit) + limits.relevance_candidates, added[0]


def _from_best_cells(sql: str, cells, where: str, source: str, wanted: str | None, score_sql: str,
                     limit_p: str, offset_p: str) -> str:
    """The page of a relevance query read from its words' best cells (docs/decisions/0007).

    The best ``limit + offset`` documents among those with a cell that can score the bound are the
    best of all when there are that many and the last scores the bound or more: every document
    ranked before it scores at least as much, so it has such a cell. Otherwise (too few matching
    documents there, or a glob matching too many words) the whole query ``sql`` runs instead; the
    check is an InitPlan, so only one of the two branches reads rows."""
    return (
        f"with {cells.ctes}, "
        f"best as materialized (select o.rid, o.uid, o.path, o.meta, {score_sql} as score "
        f"from {source} o where (select usable from bound) and {where} and {cells.row_cells} ?| "
        f"array(select c.token from cell c, bound b where b.score is null or c.upper * b.terms >= b.score) "
        f"order by score desc, o.rid desc limit {limit_p} + {offset_p}), "
        f"settled as materialized (select (select usable from bound) and ((select score from bound) is null or "
        f"((select count(*) from best) = {limit_p} + {offset_p} "
        f"and (select min(score) from best) >= (select score from bound))) as ok) "
        f"(select b.rid, b.uid, b.path, {_meta_text('b', wanted)} as meta, b.score from (select * from best "
        f"where (select ok from settled) order by score desc, rid desc offset {offset_p}) b) "
        f"union all (select * from ({sql}) q where not (select ok from settled))"
    )


def _principals_condition(iq: IndexQuery, params: Params) -> str:
    keys = [k for k in iq.keys if isinstance(k, str)]
    if iq.options:
        raise QueryError(f"index {SECURITY_INDEX!r}: only plain values are supported")
    if iq.operator == "and":
        return f"(o.allowed @> {params.add(keys, 'text[]')})"
    return f"(o.allowed && {params.add(keys, 'text[]')})"


COLUMNS = "rid, uid, path, parent, depth, allowed, idx, text, meta"


def rows_source(schema: CatalogSchema, batch_ids, params: Params) -> str:
    """The catalog's rows, or the rows as the named staged batches would leave them."""
    return rows_overlay(schema, batch_ids, params).source


def rows_overlay(schema: CatalogSchema, batch_ids, params: Params) -> RowsOverlay:
    """The rows as the named staged batches would leave them (``source``), and the two parts that
    differ from the committed rows: the committed rows they hide (``hidden``: replaced, removed or
    wiped by a clear) and their own rows that are shown (``shown``). ``source`` is the committed
    rows less ``hidden``, plus ``shown``; text statistics are overlaid the same way."""
    if not batch_ids:
        return RowsOverlay(source=schema.table, hidden="", shown="")
    cat = params.add(schema.catalog_id, "integer")
    batches = params.add(list(batch_ids), "text[]")
    # A staged clear batch wipes the catalog before its own entries: the committed rows older than
    # its version (all without one) and the rows of batches named before it are not seen.
    last_clear = (f"(select max(array_position({batches}, b.batch_id)) from catalog_batch b "
                  f"where b.catalog_id = {cat} and b.batch_id = any({batches}) and b.clear)")
    clear_version = (f"(select b.version from catalog_batch b where b.catalog_id = {cat} "
                     f"and b.batch_id = ({batches})[{last_clear}])")
    kept = f"({last_clear} is null or t.version >= {clear_version})"
    staged = f"catalog_staged s where s.catalog_id = {cat} and s.batch_id = any({batches})"
    shown = (f"(select {COLUMNS} from (select distinct on (s.uid) s.op, {COLUMNS} "
             f"from {staged} "
             f"and array_position({batches}, s.batch_id) >= coalesce({last_clear}, 0) "
             f"order by s.uid, array_position({batches}, s.batch_id) desc, s.seq desc) s where s.op = 'index')")
    source = (f"(select {COLUMNS} from {schema.table} t where {kept} and not exists "
              f"(select 1 from {staged} and s.uid = t.uid) "
              f"union all select {COLUMNS} from {shown} s)")
    # The complement of the committed part of ``source``, in two branches that each read only what
    # they hide: the wiped rows (none read without a staged clear: the gate is an InitPlan), and
    # the kept rows of the staged objects (by key).
    hidden = (f"(select t.text from {schema.table} t where {last_clear} is not null and {kept} is not true "
              f"union all select t.text from {schema.table} t where {kept} and t.catalog_id = {cat} "
              f"and t.uid in (select s.uid from {staged}))")
    return RowsOverlay(source=source, hidden=hidden, shown=shown)
