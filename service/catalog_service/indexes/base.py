"""What every index type knows: how to store its values, and how to turn its query part into SQL.

An index type mirrors one ZCatalog index class. ``stored`` turns a wire value into what goes into
the object's ``idx`` JSONB document under the index name (or ``MISSING``: ZCatalog would not index
the object); ``condition`` turns the parsed query part into an SQL boolean over the row alias ``o``;
``sort_expr`` is what ``sort_on`` orders by; ``ddl`` creates the expression indexes on the
catalog's partition that make the conditions fast.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from catalog_schemas.api import IndexDeclaration

from ..errors import BadRequest, QueryError
from ..planner.sql import Params, ident, quote_literal_name


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class BadValue(BadRequest):
    """A value sent for indexing that this index type cannot hold."""

    status = 422
    title = "Invalid index value"


# The longest text a B-tree-indexed value (a FieldIndex or UUIDIndex text value, a path) may have,
# in UTF-8 bytes. PostgreSQL refuses B-tree entries over 2,704 bytes (after compression, so
# whether a longer value fits depends on its content); ZCatalog has no such limit, but a value this
# long is no sort key or identifier, and a clear refusal beats a failed commit. Keywords and text
# words are GIN entries, which PostgreSQL hashes when long: no limit there.
MAX_KEY_BYTES = 2000


def check_key_size(value: str, what: str, *args: object) -> str:
    """``value``, or BadValue when it is longer than MAX_KEY_BYTES in UTF-8; the error names it as
    ``what % args`` (formatted only then: this runs for every key a batch stores)."""
    if len(value) > MAX_KEY_BYTES // 4 and len(value.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise BadValue(f"{what % args} is longer than {MAX_KEY_BYTES} bytes (UTF-8): {value[:40]!r}...")
    return value


@dataclass
class IndexQuery:
    """One index's part of a query, as ZCatalog's ``IndexQuery`` parses it."""

    name: str
    keys: list[Any]
    operator: str = "or"
    options: dict[str, Any] = field(default_factory=dict)
    # True when the index's query was a bare list (ZCatalog's make_query sorts those).
    from_list: bool = False

    def get(self, option: str, default: Any = None) -> Any:
        return self.options.get(option, default)


@dataclass(frozen=True)
class RowsOverlay:
    """The rows a query over staged batches sees (``source``), and as subqueries (each with a
    ``text`` column) the committed rows the batches hide and the staged rows they show: a
    statistic of ``source`` is the committed one, less the hidden rows', plus the shown rows'."""

    source: str
    hidden: str
    shown: str


@dataclass
class QueryContext:
    """What a condition may need besides its own query part."""

    params: Params
    catalog_id: int
    table: str
    # Index names present in the query, in the order ZCatalog applies them.
    applied: list[str] = field(default_factory=list)
    # The caller's security conditions over another row alias: a condition that probes other rows
    # than the result row (``exists (select 1 from {table} x ...)``) must apply them to ``x``.
    visible: Callable[[str], list[str]] = lambda row: []
    # Set when the query names staged batches: the catalog-wide statistics (a text index's lexicon
    # and Okapi counts) are the committed ones overlaid with the batches' rows.
    overlay: RowsOverlay | None = None
    # CTEs (name -> body) a condition or score needs; the planner puts them, materialized, before
    # the statement that uses them (the page).
    ctes: dict[str, str] = field(default_factory=dict)

    def visible_sql(self, row: str) -> str:
        return " and ".join(["true", *self.visible(row)])

    def is_first(self, name: str) -> bool:
        return bool(self.applied) and self.applied[0] == name


class Index:
    type_name: ClassVar[str] = ""
    query_options: ClassVar[tuple[str, ...]] = ("query",)
    operators: ClassVar[tuple[str, ...]] = ("or", "and")
    default_operator: ClassVar[str] = "or"
    sortable: ClassVar[bool] = False
    # The value of an object that has none for this index (MISSING: it is not in the index).
    absent_value: ClassVar[Any] = MISSING
    # False for indexes that never parse their query (ZCatalog's non-IQueryIndex ones).
    checks_options: ClassVar[bool] = True

    def __init__(self, decl: IndexDeclaration):
        self.decl = decl
        self.name = decl.name
        self.key = quote_literal_name(decl.name)

    # -- storage ---------------------------------------------------------------------------
    def stored(self, value: Any) -> Any:
        raise NotImplementedError

    def ddl(self, table: str) -> list[str]:
        return []

    # Suffixes of indexes that earlier versions made for this index type and ``ddl`` replaces.
    superseded: tuple[str, ...] = ()

    # -- queries ---------------------------------------------------------------------------
    def condition(self, q: IndexQuery, ctx: QueryContext) -> str:
        raise NotImplementedError

    def sort_expr(self) -> str:
        raise QueryError(
            f"The index chosen for sort_on is not capable of being used as a sort index: {self.name!r}"
        )

    def unique_values_sql(self, table: str) -> str | None:
        """SQL returning, per distinct value in order, ``value`` (jsonb) and ``objects`` (how many
        objects hold it); None when the index type has no unique values. ``table`` may be a
        parenthesised subquery (the rows as staged batches leave them)."""
        return None

    def holders_sql(self, table: str) -> str:
        """SQL counting the objects the index holds (ZCatalog's ``numObjects()``)."""
        return f"select count(*) from {table} o where {self.has_value}"

    # -- helpers ---------------------------------------------------------------------------
    @property
    def json(self) -> str:
        """The index's value in the row's JSONB document."""
        return f"(o.idx->{self.key})"

    @property
    def has_value(self) -> str:
        return f"(o.idx ? {self.key})"

    def index_name(self, table: str, suffix: str) -> str:
        return index_ident(table, self.name, suffix)


def index_ident(table: str, index: str, suffix: str) -> str:
    """The quoted name of an expression index. Quoted, because index names are case-sensitive
    (``Subject`` and ``subject`` are two indexes) and PostgreSQL folds unquoted names to lower
    case; PostgreSQL cuts names at 63 bytes, so long ones get a hash of the whole name."""
    name = f"{table}_{index}_{suffix}"
    if len(name) > 63:
        digest = hashlib.sha1(name.encode()).hexdigest()[:10]
        name = f"{table}_{index[:30]}_{digest}_{suffix}"
    return ident(name)
