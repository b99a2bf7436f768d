"""BooleanIndex, DateRangeIndex and GopipIndex."""

from __future__ import annotations

from typing import Any

from ..errors import QueryError
from .base import MISSING, BadValue, Index, IndexQuery, QueryContext
from .dates import BadDate, epoch_minutes

# Names of the expression statistics of a DateRangeIndex's two bounds.
STATISTICS_SUFFIXES = ("lo", "hi")


def first_key(q: IndexQuery) -> Any:
    """ZCatalog's make_query sorts a bare list before an index reads its first key."""
    keys = q.keys
    if q.from_list:
        try:
            keys = sorted(keys)
        except TypeError as exc:
            raise QueryError(f"index {q.name!r}: query values are not comparable: {keys!r}") from exc
    return keys[0]


class BooleanIndex(Index):
    """True/False per object; None counts as False, a missing attribute is not indexed."""

    type_name = "BooleanIndex"
    query_options = ("query",)
    sortable = True

    def stored(self, value: Any) -> Any:
        return bool(value)

    def condition(self, q: IndexQuery, ctx: QueryContext) -> str:
        if not q.keys:
            return "false"
        # The value as a parameter, as every other index's: the SQL text depends on the shape only.
        return f"({self.json} = {ctx.params.add('true' if bool(first_key(q)) else 'false', 'jsonb')})"

    def sort_expr(self) -> str:
        return f"(({self.json})::boolean)"

    def ddl(self, table: str) -> list[str]:
        # With the rid: a sort on two values is all ties (see ScalarIndex.ddl).
        return [f"create index if not exists {self.index_name(table, 'r')} on {table} "
                f"(((idx->{self.key})::boolean), rid)"]

    superseded = ("v",)

    def unique_values_sql(self, table: str) -> str:
        # ZCatalog's BooleanIndex lists both values always, each with its objects (none too).
        return (f"select b.v as sortkey, to_jsonb(b.v) as value, count(o.rid) as objects "
                f"from (values (false), (true)) b(v) left join {table} o on ({self.json})::boolean = b.v "
                f"group by 1 order by 1")


class DateRangeIndex(Index):
    """[since, until] in minutes since the epoch; an open end is null. Every object is indexed."""

    type_name = "DateRangeIndex"
    query_options = ("query",)
    absent_value = (None, None)  # ZCatalog indexes every object, open at both ends
    floor_value = -510162480
    ceiling_value = 278751600

    def __init__(self, decl):
        super().__init__(decl)
        self.precision = decl.precision_value or 1

    def _minutes(self, value: Any) -> int | None:
        if value is None:
            return None
        minutes = epoch_minutes(value, self.precision)
        if minutes > self.ceiling_value or minutes < self.floor_value:
            return None
        return minutes

    def stored(self, value: Any) -> Any:
        if value is None:
            return [None, None]
        if not isinstance(value, list) or len(value) != 2:

            raise BadValue(f"index {self.name!r} takes [since, until], got {value!r}")
        try:
            return [self._minutes(value[0]), self._minutes(value[1])]
        except BadDate as exc:

            raise BadValue(f"index {self.name!r}: {exc.detail}") from exc

    def term(self, value: Any) -> int:
        term = self._minutes(value)
        if term is None:
            raise QueryError(f"index {self.name!r}: a date within the indexable range is required")
        return term

    def _bound(self, end: int, row: str = "o.") -> str:
        return f"({row}idx->{self.key}->>{end})::bigint"

    def covers(self, term_sql: str, row: str = "o.") -> str:
        # An open end (null) covers every date. Written as OR rather than coalesce(), so the
        # planner estimates it from the bounds' expression statistics (ddl): with coalesce() it
        # guessed, and chose to sort every match of a long listing instead of walking its
        # sort index.
        since, until = self._bound(0, row), self._bound(1, row)
        return (f"(({since} <= {term_sql} or {since} is null) and "
                f"({until} >= {term_sql} or {until} is null))")

    def ddl(self, table: str) -> list[str]:
        # Statistics on the bounds (no index: the range is rarely selective on its own).
        return [f"create statistics if not exists {self.index_name(table, end)} on ({self._bound(i, '')}) "
                f"from {table}" for i, end in enumerate(STATISTICS_SUFFIXES)]

    def condition(self, q: IndexQuery, ctx: QueryContext) -> str:
        if not q.keys:
            raise QueryError(f"index {self.name!r}: a date is required")
        return self.covers(ctx.params.add(self.term(first_key(q)), "bigint"))

    def sort_expr(self) -> str:
        # ZCatalog sorts by the (since, until) tuple; nulls (open ends) are None, which Python 3
        # cannot compare, so ZCatalog itself only sorts catalogs without open ends.
        return f"catalog_int_array(o.idx->{self.key})"

    def unique_values_sql(self, table: str) -> str:
        # ZCatalog's DateRangeIndex has values only for its since and until attribute names, and
        # uniqueValuesFor asks with the index's own: none.
        return "select null::bigint as sortkey, null::jsonb as value, 0::bigint as objects where false"

    def bound_values_sql(self, table: str, attribute: str) -> str:
        """ZCatalog's ``uniqueValues(name=attribute)``: for the since (or until) attribute, the
        minutes of the objects with both ends, in order, then of those with that end only, in
        order (two separate mappings: a value can come twice); none for another name."""
        if attribute not in (self.decl.since_field, self.decl.until_field):
            return self.unique_values_sql(table)
        end = 0 if attribute == self.decl.since_field else 1
        bound, other = self._bound(end), self._bound(1 - end)
        # The second mapping's values after the first's: an offset beyond the indexable range.
        return (f"select {bound} + case when {other} is null then 1000000000000 else 0 end as sortkey, "
                f"to_jsonb({bound}) as value, count(*) as objects from {table} o "
                f"where {bound} is not null group by 1, 2 order by 1")


class GopipIndex(Index):
    """Position in the parent folder: sorts, but is not queryable (plone.folder's GopipIndex
    answers every query with nothing)."""

    type_name = "GopipIndex"
    sortable = True
    checks_options = False

    def stored(self, value: Any) -> Any:
        if value is None or isinstance(value, bool) or not isinstance(value, int):
            return MISSING
        if not -2**63 <= value < 2**63:  # sorted and indexed as a bigint
            raise BadValue(f"index {self.name!r}: position {value} is out of range")
        return value

    def condition(self, q: IndexQuery, ctx: QueryContext) -> str:
        return "false"

    def sort_expr(self) -> str:
        return f"((o.idx->>{self.key})::bigint)"

    def ddl(self, table: str) -> list[str]:
        # Unordered folders give every item the same position: the rid orders the ties.
        return [f"create index if not exists {self.index_name(table, 'pr')} on {table} "
                f"(parent, ((idx->>{self.key})::bigint), rid)"]

    superseded = ("p",)
