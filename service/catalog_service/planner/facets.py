"""Plan facet counts: per index named, the objects of the whole result per value (decision 0019).

A facet on index X counts, for each value v, what ZCatalog would count for the query with
``X=v`` in place of the query's own condition on X (if any): ``dict(query, X=v)``. For an index
the query does not name that is the result grouped by X's values; for one it names, the counts
ignore its own selection and apply every other one (disjunctive facets: a search form shows
what choosing another value of X would find). The caller's security and effective-date filter
apply as to the result, and so does ``sort_on`` (ZCatalog drops objects without a sort key).

One statement: the rows of the result, materialized once with the values of the facets that
group them; a facet whose index the query names reads its own rows (the query without that
index); then grouped counts per facet, ranked, cut to each facet's limit, as one JSON text. The
statement's text depends on the query's shape and the facets asked; values are parameters.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..errors import LimitExceeded, QueryError
from ..indexes import Index
from ..indexes.unindex import KeywordIndex
from .plan import (
    RESERVED,
    SECURITY_INDEX,
    CatalogSchema,
    Limits,
    Security,
    Selection,
    _sort_spec,
    application_order,
    queried_indexes,
    rows_overlay,
    select_rows,
)
from .sql import Params, all_of, quote_literal_name

# Index types whose values are plain JSON scalars worth counting: one value per object, or
# keywords. Dates, ranges, paths, text and positions have no such values (or none a search form
# lists); asking for them is a 400.
FACET_TYPES = frozenset({"FieldIndex", "UUIDIndex", "BooleanIndex", "KeywordIndex"})
DEFAULT_LIMIT = 100


@dataclass(frozen=True)
class Facet:
    index: str
    limit: int
    sort: str  # "count": most frequent first; "value": in value order


@dataclass
class FacetPlan:
    facets: list[Facet]
    # One row, one column ``facets``: JSON text {"total": n, "counts": [[facet, distinct, value,
    # count, rank], ...]} in each facet's order; ``total`` is the size of the query's result. A
    # facet with a limit of 0 still sends its first value, for ``distinct`` (facet_counts drops it).
    sql: str
    params: list[Any]


def parse_facets(specs: list, schema: CatalogSchema, limits: Limits) -> list[Facet]:
    """Facet requests (index names, or objects with ``index``, ``limit``, ``sort``) checked
    against the schema."""
    if len(specs) > limits.max_facets:
        raise LimitExceeded(f"{len(specs)} facets asked for, at most {limits.max_facets}")
    facets = []
    for spec in specs:
        if isinstance(spec, str):
            name, limit, sort = spec, None, "count"
        else:
            name, limit, sort = spec.index, spec.limit, spec.sort
        index = schema.indexes.get(name)
        if index is None:
            raise QueryError(f"facet {name!r}: the catalog has no such index",
                             valid=sorted(n for n, i in schema.indexes.items() if facetable(i)))
        if name == SECURITY_INDEX:
            raise QueryError(f"facet {name!r}: the principals that may see objects are not counted")
        if not facetable(index):
            raise QueryError(f"facet {name!r}: a {index.type_name} cannot be faceted (only "
                             f"{', '.join(sorted(FACET_TYPES))})")
        if any(f.index == name for f in facets):
            raise QueryError(f"facet {name!r} is asked for twice")
        limit = DEFAULT_LIMIT if limit is None else limit
        if limit > limits.max_facet_values:
            raise LimitExceeded(f"facet {name!r}: limit {limit}, at most {limits.max_facet_values}")
        facets.append(Facet(index=name, limit=limit, sort=sort))
    return facets


def facetable(index: Index) -> bool:
    return index.type_name in FACET_TYPES and index.name != SECURITY_INDEX


def without_index(query: dict[str, Any], name: str) -> dict[str, Any]:
    """``query`` less its condition on ``name``, old-style options (``name_operator``) included:
    ``dict(query, name=v)`` would replace the one and give the others to ``v``."""
    prefix = name + "_"
    return {k: v for k, v in query.items() if k != name and (k in RESERVED or not k.startswith(prefix))}


def plan_facets(
    query: dict[str, Any],
    schema: CatalogSchema,
    limits: Limits,
    security: Security,
    facets: list[Facet],
    batch_ids: list[str] | tuple[str, ...] = (),
    params: Params | None = None,
    nothing: bool = False,
) -> FacetPlan:
    """The facet statement. With ``params`` (holding another statement's parameters) its
    parameters follow those, to run inside that statement. ``nothing``: the query is known to
    find nothing (an invalid part that ZCatalog reports only after a match)."""
    params = params if params is not None else Params()
    overlay = rows_overlay(schema, batch_ids, params)
    source = overlay.source
    queried = queried_indexes(query, schema, limits)
    sort_conditions = [f"({index.sort_expr()}) is not null" for index, _ in _sort_spec(query, schema)]
    main = None if nothing else select_rows(query, schema, limits, security, params, overlay, batch_ids,
                                            queried=queried)
    if main is not None and main.deferred_error is not None:
        raise main.deferred_error
    main_first = main.ctx.applied[0] if main is not None and main.ctx.applied else None
    main_where = "false" if main is None or not main.applied else all_of(main.conditions + sort_conditions)

    shared: list[str] = []  # the columns of the result's rows that facets group
    # Facets counted over the query without their index: (number, key, that query, its selection
    # planned aside, the parameters it was planned with).
    rests: list[tuple[int, str, dict, Selection, list]] = []
    counted: list[str] = []
    for number, facet in enumerate(facets):
        index = schema.indexes[facet.index]
        key = quote_literal_name(facet.index)
        if main is not None and main.applied and facet.index not in queried[0] and (
                main_first is None or application_order([main_first, facet.index], schema)[0] == main_first):
            # dict(query, X=v) selects the result's rows with X=v: group those. (Unless X would be
            # applied first, which changes what an ``and`` without keys of the former first
            # index finds: then it is planned on its own, below.)
            column, rows = f"fm.f{number}", "fm"
            shared.append(f"o.idx->{key} as f{number}")
        else:
            rest_query = without_index(query, facet.index)
            if nothing and rest_query == query:
                continue  # the same invalid query with X=v: it finds nothing either
            # Planned aside first: its conditions may be the result's less some (below).
            aside = Params()
            aside.values = list(params.values)
            rest = select_rows(rest_query, schema, limits, security, aside, overlay, batch_ids,
                               also_applied=(facet.index,))
            if rest.deferred_error is not None:
                # ZCatalog would raise for the values whose objects the indexes before the invalid
                # part find: refuse the facet rather than guess which.
                raise rest.deferred_error
            column, rows = f"fr{number}.f", f"fr{number}"
            rests.append((number, key, rest_query, rest, aside.values))
        if isinstance(index, KeywordIndex):
            grouped = (f"select e.value, count(*) as objects from {rows} cross join lateral "
                       f"jsonb_array_elements({column}) e group by 1")
        else:
            grouped = f"select {column} as value, count(*) as objects from {rows} where {column} is not null group by 1"
        text = getattr(index, "cast", "") == "text" or getattr(index, "text", False)
        sortkey = "(g.value #>> '{}') collate \"C\"" if text else "g.value"
        order = f"g.objects desc, {sortkey}" if facet.sort == "count" else sortkey
        limit = params.add(facet.limit, "bigint")
        counted.append(f"select * from (select {number} as facet, g.value, g.objects, "
                       f"row_number() over (order by {order}) as rank, count(*) over () as distinct_values "
                       f"from ({grouped}) g) r where r.rank <= greatest({limit}, 1)")
    narrowing = None
    if len(rests) == 1 and main_where != "false":
        narrowing = _narrowing(main.conditions, params.values, rests[0][3].conditions, rests[0][4])
    if narrowing is not None:
        # One facet whose index the query names (a value chosen in a search form): its rows are
        # those of the result's conditions but some, and the result's rows are the ones of them
        # that meet those too. One scan of the wider rows, the result picked from it.
        number, key = rests[0][:2]
        common, extra = narrowing
        columns = [f"o.idx->{key} as f", *shared, f"({all_of(extra)}) as sel"]
        ctes = [f"fr{number} as materialized (select {', '.join(columns)} from {source} o "
                f"where {all_of(common + sort_conditions)})"]
        names = [column.rsplit(" as ", 1)[1] for column in shared]
        fm = f"fm as materialized (select {', '.join(names) or '1 as one'} from fr{number} where sel)"
        ctes_sql = ", ".join([*ctes, fm])
    else:
        ctes = []
        for number, key, rest_query, _, _ in rests:
            rest = select_rows(rest_query, schema, limits, security, params, overlay, batch_ids,
                               also_applied=(facets[number].index,))
            ctes.append(f"fr{number} as (select o.idx->{key} as f from {source} o "
                        f"where {all_of(rest.conditions + sort_conditions)})")
        fm = f"fm as materialized (select {', '.join(shared) or '1 as one'} from {source} o where {main_where})"
        ctes_sql = ", ".join([fm, *ctes])
    union = " union all ".join(counted) or "select null::integer as facet, null::jsonb as value, " \
                                           "null::bigint as objects, null::bigint as rank, " \
                                           "null::bigint as distinct_values where false"
    sql = (f"with {ctes_sql}, c as ({union}) "
           f"select json_build_object('total', (select count(*) from fm), 'counts', coalesce((select "
           f"json_agg(json_build_array(c.facet, c.distinct_values, c.value, c.objects, c.rank) order by c.facet, c.rank) "
           f"from c), '[]'))::text as facets")
    return FacetPlan(facets=facets, sql=sql, params=params.values)


_PLACEHOLDER = re.compile(r"\$(\d+)::")


def _narrowing(conditions: list[str], values: list[Any], wider: list[str], wider_values: list[Any]
               ) -> tuple[list[str], list[str]] | None:
    """``conditions`` (parameters in ``values``) split into those ``wider`` (parameters in
    ``wider_values``) also has and the rest, when every one of ``wider`` is among them; else None.
    Conditions are compared as SQL with each parameter replaced by its value: the rows that meet
    ``conditions`` are then the rows meeting ``wider`` that also meet the rest."""
    def plain(condition: str, known: list[Any]) -> str:
        return _PLACEHOLDER.sub(lambda m: f"⟨{known[int(m.group(1)) - 1]!r}⟩::", condition)

    missing = Counter(plain(c, wider_values) for c in wider)
    common, extra = [], []
    for condition in conditions:
        text = plain(condition, values)
        if missing[text]:
            missing[text] -= 1
            common.append(condition)
        else:
            extra.append(condition)
    return None if +missing else (common, extra)


def facet_counts(facets: list[Facet], counts: list[list[Any]]) -> dict[str, dict[str, Any]]:
    """The ``facets`` of a search answer from the statement's rows, every facet present."""
    found: dict[str, dict[str, Any]] = {f.index: {"values": [], "distinct": 0} for f in facets}
    for number, distinct, value, objects, rank in counts:
        facet = facets[number]
        entry = found[facet.index]
        entry["distinct"] = distinct
        if rank <= facet.limit:
            entry["values"].append({"value": value, "count": objects})
    return found
