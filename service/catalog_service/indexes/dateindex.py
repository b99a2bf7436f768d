"""DateIndex and DateRecurringIndex: dates stored as ZCatalog's minute integers."""

from __future__ import annotations

from typing import Any

from .base import MISSING, BadValue
from .dates import BadDate, date_index_minutes
from .recurrence import RecurrenceError, occurrences
from .unindex import _UNMATCHABLE, KeywordIndex, ScalarIndex


class DateIndex(ScalarIndex):
    type_name = "DateIndex"
    query_options = ("query", "range", "not")
    operators = ("or",)
    converts_keys = True

    def __init__(self, decl):
        super().__init__(decl)
        self.cast = "bigint"

    def value_expr(self, alias: str = "o") -> str:
        return f"(({alias}.idx->>{self.key})::bigint)"

    def stored(self, value: Any) -> Any:
        if value is None or value == "":
            return MISSING  # DateIndex._convert gives its default: not indexed
        try:
            return date_index_minutes(value)
        except BadDate as exc:
            raise BadValue(f"index {self.name!r}: {exc.detail}") from exc

    def convert_key(self, key: Any) -> Any:
        if key is None or key == "":
            return None
        return date_index_minutes(key)  # a bad date raises, as DateTime() does in ZCatalog


class DateRecurringIndex(KeywordIndex):
    """Products.DateRecurringIndex: every occurrence of a (possibly recurring) date, in minutes.

    Wire value: ``{"start": iso, "recurrence": "RRULE:..." | null, "until": iso | null, "tz": name}``
    (``tz`` optional) or a plain ISO date. Occurrences are expanded at index time, bounded like
    plone.event's expansion, in the zone ``tz`` names (recurrence.py).
    """

    type_name = "DateRecurringIndex"
    query_options = ("query", "range", "not")
    operators = ("or", "and")
    sortable = True
    converts_keys = True

    def __init__(self, decl):
        super().__init__(decl)
        self.text = False
        self.cast = "bigint"

    def stored(self, value: Any) -> Any:
        if value is None:
            return MISSING
        if isinstance(value, dict):
            start, rule, until = value.get("start"), value.get("recurrence"), value.get("until")
            tz_name = value.get("tz")
        else:
            start, rule, until, tz_name = value, None, None, None
        if start is None:
            return MISSING
        try:
            found = occurrences(start, rule, until, tz_name)
        except (BadDate, RecurrenceError) as exc:
            raise BadValue(f"index {self.name!r}: {exc}") from exc
        # No occurrence (every date excluded, or after ``until``): ZCatalog leaves the object out
        # of the index, so it counts as having no value (a ``not`` query, unique values).
        return found or MISSING

    def convert_key(self, key: Any) -> Any:
        if key is None:
            return None
        if isinstance(key, bool):
            return _UNMATCHABLE
        return date_index_minutes(key) or None

    def element_expr(self, element: str) -> str:
        return f"(({element} #>> '{{}}')::bigint)"

    def match_any(self, values, ctx, alias="o"):
        if not values:
            return "false"
        p = ctx.params.add(values, "bigint[]")
        return (f"exists (select 1 from jsonb_array_elements({alias}.idx->{self.key}) e "
                f"where {self.element_expr('e')} = any({p}))")

    def sort_expr(self) -> str:
        # ZCatalog sorts by the tuple of occurrences; bigint[] compares the same way.
        return f"catalog_int_array(o.idx->{self.key})"

    def ddl(self, table: str) -> list[str]:
        return [f"create index if not exists {self.index_name(table, 'g')} on {table} "
                f"using gin ((idx->{self.key}) jsonb_path_ops)"]
