"""ExtendedPathIndex (and PathIndex): paths compared component by component, never as patterns.

Paths are normalised as ZCatalog does ("/" + "/".join(non-empty components)). The catalog's own
``path``, ``parent`` and ``depth`` columns hold the physical path of each object; a path index over
another attribute keeps its value in the JSONB document and uses the same SQL on expressions.

Semantics follow ``Products.ExtendedPathIndex.ExtendedPathIndex.search`` (see the tests):

- level 0, depth -1: the object at the path and everything below it;
- level 0, depth 0: the object itself; depth 1: its children only (not itself);
- depth >= 2 (or level != 0): objects ending 0..depth levels below the matched path, itself included;
- level > 0 matches the components at that position; level < 0 at any position;
- navtree (depth -1 means 1): with depth 1, the children of every container along the path from
  ``navtree_start`` down; with depth 0, the containers along the path themselves (breadcrumbs).
"""

from __future__ import annotations

from typing import Any

from ..errors import QueryError
from ..planner.sql import all_of, any_of
from .base import MISSING, BadValue, Index, IndexQuery, QueryContext, check_key_size


def components(path: str) -> list[str]:
    return [c for c in path.split("/") if c]


def normalise(path: str) -> str:
    return "/" + "/".join(components(path))


def parent_of(path: str) -> str:
    return "/" + "/".join(components(path)[:-1])


class ExtendedPathIndex(Index):
    type_name = "ExtendedPathIndex"
    query_options = ("query", "level", "operator", "depth", "navtree", "navtree_start")
    operators = ("or", "and")

    def __init__(self, decl):
        super().__init__(decl)
        # The physical-path index uses the typed columns; others their JSON value.
        self.physical = decl.name == "path" and decl.indexed_attrs in ([], ["getPhysicalPath"])

    def stored(self, value: Any) -> Any:
        if value is None:
            return MISSING
        if isinstance(value, list):
            value = "/" + "/".join(str(v) for v in value[1:])
        if not isinstance(value, str):
            raise BadValue(f"index {self.name!r}: path value must be a string, got {value!r}")
        return check_key_size(normalise(value), "a path of index %r", self.name)

    # Expressions over the row.
    @property
    def path_expr(self) -> str:
        return "o.path" if self.physical else f'((o.idx->>{self.key}) collate "C")'

    @property
    def parent_expr(self) -> str:
        if self.physical:
            return "o.parent"
        return f"catalog_path_parent(o.idx->>{self.key})"

    @property
    def depth_expr(self) -> str:
        return "o.depth" if self.physical else f"catalog_path_depth(o.idx->>{self.key})"

    @property
    def comps_expr(self) -> str:
        # string_to_array('/a/b', '/') = {"",a,b}: component k (0-based) is element k + 2.
        return f"string_to_array({self.path_expr}, '/')"

    def condition(self, q: IndexQuery, ctx: QueryContext) -> str:
        level = _int(q.get("level", 0), "level")
        depth = _int(q.get("depth", -1), "depth")
        navtree = bool(q.get("navtree", 0))
        navtree_start = _int(q.get("navtree_start", 0), "navtree_start")
        parts = []
        for key in q.keys:
            if isinstance(key, str):
                path, key_level = key, level
            elif isinstance(key, list) and len(key) == 2 and isinstance(key[0], str):
                path, key_level = key[0], _int(key[1], "level")
            else:
                raise QueryError(f"index {self.name!r}: a path must be a string or [path, level], got {key!r}")
            parts.append(self.search(path, key_level, depth, navtree, navtree_start, ctx))
        if not parts:
            return "false"
        return all_of(parts) if q.operator == "and" else any_of(parts)

    def search(self, path: str, level: int, depth: int, navtree: bool, navtree_start: int,
               ctx: QueryContext) -> str:
        comps = components(path)
        # Below -(len + 1) a navtree_start changes nothing (ExtendedPathIndex slices comps[:i]
        # with i down to it: the root again and again), but would cost a path per level.
        navtree_start = max(navtree_start, -(len(comps) + 1))
        if navtree and depth == -1:
            depth = 1
        if level < 0:
            return any_of([self._at_level0(comps, depth, navtree, navtree_start, ctx),
                           self._at_any_level(comps, depth, navtree, ctx)])
        if level == 0:
            return self._at_level0(comps, depth, navtree, navtree_start, ctx)
        if navtree:
            raise QueryError(f"index {self.name!r}: navtree with level > 0 is not supported")
        return self._at_level(comps, level, depth, ctx)

    def _at_level0(self, comps, depth, navtree, navtree_start, ctx) -> str:
        p = ctx.params
        q = len(comps)
        if navtree:
            # ExtendedPathIndex returns nothing when navtree_start is past the deepest level
            # (min(path length + depth, deepest level)); "some object ends at or below
            # navtree_start" is that test without scanning for the maximum.
            if navtree_start > q - 1 + depth:
                return "false"
            guard = "true" if navtree_start <= 0 else (
                f"exists (select 1 from {ctx.table} x where {self.depth_expr.replace('o.', 'x.')} > "
                f"{p.add(navtree_start, 'integer')} and {ctx.visible_sql('x')})")
            if depth not in (0, 1):
                return f"({guard} and {self._navtree_deep(comps, depth, navtree_start, ctx)})"
            steps = ["/" + "/".join(comps[:i]) for i in range(q, navtree_start - 1, -1)]
            column = self.parent_expr if depth == 1 else self.path_expr
            return f"({guard} and {column} = any({p.add(steps, 'text[]')}))"
        full = "/" + "/".join(comps)
        if depth == 0:
            return f"({self.path_expr} = {p.add(full, 'text')})"
        if depth == 1:
            return f"({self.parent_expr} = {p.add(full, 'text')})"
        if not comps:
            within = "true"
        else:
            prefix = p.add(full + "/", "text")
            upper = p.add(full + "0", "text")  # '0' follows '/' in code point order
            within = (f"({self.path_expr} = {p.add(full, 'text')} or "
                      f"({self.path_expr} >= {prefix} and {self.path_expr} < {upper}))")
        if depth < 0:
            return within
        return (f"({within} and {self.depth_expr} between {p.add(q, 'integer')} "
                f"and {p.add(q + depth, 'integer')})")

    def _navtree_deep(self, comps, depth, navtree_start, ctx) -> str:
        """navtree with depth >= 2, ExtendedPathIndex's general algorithm. It first drops the
        components the query shares with the catalog's own location (/<site>/portal_catalog):
        for queries inside the site, the site's id, so matching starts at level 1. The site is
        recognised as the first component of the catalog's objects' paths."""
        if not comps:
            return self._navtree_deep_at(comps, depth, navtree_start, 0, ctx)
        p = ctx.params
        site = "/" + comps[0]
        inside = (f"exists (select 1 from {ctx.table} x where x.path >= {p.add(site + '/', 'text')} "
                  f"and x.path < {p.add(site + '0', 'text')} and {ctx.visible_sql('x')})") if self.physical else "true"
        return (f"(case when {inside} then {self._navtree_deep_at(comps, depth, navtree_start, 1, ctx)} "
                f"else {self._navtree_deep_at(comps, depth, navtree_start, 0, ctx)} end)")

    def _navtree_deep_at(self, comps, depth, navtree_start, shift, ctx) -> str:
        p = ctx.params
        rest = comps[shift:]
        levels = f"({self.depth_expr} - 1)"
        parts = [f"({levels} between {p.add(min(navtree_start, shift), 'integer')} "
                 f"and {p.add(max(navtree_start, shift), 'integer')})"]
        # The containers along the path, from navtree_start down.
        along = ["/" + "/".join(comps[:shift + i + 1]) for i in range(len(rest)) if i + shift >= navtree_start]
        if along:
            parts.append(f"({self.path_expr} = any({p.add(along, 'text[]')}))")
        start = max(len(rest) - 1, navtree_start - shift)
        below = (f"({levels} between {p.add(start + shift, 'integer')} and "
                 f"{p.add(start + shift + depth, 'integer')})")
        if rest:
            full = "/" + "/".join(comps)
            below = (f"({below} and ({self.path_expr} = {p.add(full, 'text')} or "
                     f"({self.path_expr} >= {p.add(full + '/', 'text')} and "
                     f"{self.path_expr} < {p.add(full + '0', 'text')})))")
        parts.append(below)
        return any_of(parts)

    def _at_level(self, comps, level, depth, ctx) -> str:
        p = ctx.params
        q = len(comps)
        parts = []
        if comps:
            parts.append(f"(({self.comps_expr})[{p.add(level + 2, 'integer')}:{p.add(level + q + 1, 'integer')}] "
                         f"= {p.add(comps, 'text[]')})")
        elif depth < 0:
            return "true"
        if depth >= 0:
            lo = level + q if comps else level
            parts.append(f"({self.depth_expr} between {p.add(lo, 'integer')} and {p.add(lo + depth, 'integer')})")
        return all_of(parts)

    def _at_any_level(self, comps, depth, navtree, ctx) -> str:
        if navtree:
            raise QueryError(f"index {self.name!r}: navtree with level < 0 is not supported")
        p = ctx.params
        q = len(comps)
        if not comps:
            return "true" if depth < 0 else (
                f"({self.depth_expr} >= 1 and {self.depth_expr} <= {p.add(depth, 'integer')} + "
                f"{self.depth_expr})")
        depth_check = "true" if depth < 0 else (
            f"{self.depth_expr} between l + {p.add(q, 'integer')} and l + {p.add(q + depth, 'integer')}")
        return (f"exists (select 1 from generate_series(1, {self.depth_expr}) as g(l) "
                f"where ({self.comps_expr})[l + 2:l + {p.add(q + 1, 'integer')}] = {p.add(comps, 'text[]')} "
                f"and {depth_check})")

    sortable = True

    def sort_expr(self) -> str:
        # PathIndex.documentToKeyMap: the path string.
        return self.path_expr

    def ddl(self, table: str) -> list[str]:
        if self.physical:
            return []  # path, parent are indexed by the partition's own indexes
        return [f'create index if not exists {self.index_name(table, "v")} on {table} (((idx->>{self.key}) collate "C"))']

    # ExtendedPathIndex also indexes a None terminator per object (PathIndex does not), which
    # uniqueValues lists first.
    terminator = True

    def holders_sql(self, table: str) -> str:
        if self.physical:
            return f"select count(*) from {table} o"  # every object has its physical path
        return super().holders_sql(table)

    def unique_values_sql(self, table: str) -> str:
        # uniqueValues lists the keys of the component mapping: every path component (at any
        # level), in code point order, after None. Per component, how many objects hold it at any
        # level (PathIndex's withLengths; ExtendedPathIndex's raises, which the connector repeats).
        # '' stands for None: no component is empty, and it sorts first.
        where = "" if self.physical else f"where {self.has_value}"
        parts = [f"select o.rid, c as k from {table} o, unnest(string_to_array({self.path_expr}, '/')) c "
                 f"where c <> '' {'' if self.physical else 'and ' + self.has_value}"]
        if self.terminator:
            parts.append(f"select o.rid, '' as k from {table} o {where}")
        return (f"select (p.k collate \"C\") as sortkey, "
                f"case when p.k = '' then 'null'::jsonb else to_jsonb(p.k) end as value, "
                f"count(distinct p.rid) as objects from ({' union all '.join(parts)}) p group by 1, 2 order by 1")


class PathIndex(ExtendedPathIndex):
    type_name = "PathIndex"
    query_options = ("query", "level", "operator")
    terminator = False


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        return int(value)
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise QueryError(f"path option {name!r} must be an integer, got {value!r}") from exc
