"""ZCatalog's UnIndex semantics (FieldIndex, KeywordIndex, DateIndex, UUIDIndex, DateRecurringIndex).

The rules are those of ``Products.PluginIndexes.unindex.UnIndex.query_index``, including its
corners, because Plone code and add-ons rely on them:

- ``None`` among the query keys is skipped; with operator ``or`` a key that matches no value adds
  nothing, with ``and`` it empties the result.
- ``range``: ``min``/``max`` anywhere in the option string; the bounds are ``min(keys)`` and
  ``max(keys)`` (so inverted bounds are reordered); a falsy upper bound (0, "") means no upper bound.
- ``not`` alone (no keys, no range): if some object in the catalog has one of the excluded values,
  the result is every object except those (including objects without a value); if none has, it is
  every object that has a value in this index.
- ``and`` with no usable keys returns the result of the indexes applied before it, or nothing
  when it is the first index applied.
"""

from __future__ import annotations

from typing import Any

from ..errors import QueryError
from ..planner.sql import all_of
from .base import MISSING, BadValue, Index, IndexQuery, QueryContext, check_key_size

_UNMATCHABLE: Any = object()


class UnIndex(Index):
    query_options = ("query", "range", "not")
    operators = ("or", "and")
    multi_valued = False
    # SQL cast of one value, and of a parameter holding many.
    cast = "text"
    sortable = True
    # Whether query keys are converted to another form before lookup (ZCatalog's _convert).
    converts_keys = False

    # -- values ------------------------------------------------------------------------------
    def convert_key(self, key: Any) -> Any:
        """A query key in stored form; None to skip it; _UNMATCHABLE when it can match nothing."""
        return key

    def value_expr(self, alias: str = "o") -> str:
        """The stored value as a typed SQL scalar (single-valued indexes)."""
        raise NotImplementedError

    def element_expr(self, element: str) -> str:
        """One element (a jsonb value) of a multi-valued index as a typed SQL scalar."""
        raise NotImplementedError

    # -- conditions --------------------------------------------------------------------------
    def match_any(self, values: list[Any], ctx: QueryContext, alias: str = "o") -> str:
        if not values:
            return "false"
        p = ctx.params.add(values, self.cast + "[]")
        return f"({self.value_expr(alias)} = any({p}))"

    def match_all(self, values: list[Any], ctx: QueryContext) -> str:
        distinct = list(dict.fromkeys(values))
        if len(distinct) > 1:
            return "false"  # one value per object cannot equal two keys
        return self.match_any(distinct, ctx)

    def match_range(self, lo: Any, hi: Any, ctx: QueryContext) -> str:
        return self._bounds(self.value_expr(), lo, hi, ctx)

    def match_range_all(self, lo: Any, hi: Any, ctx: QueryContext) -> str:
        """``and`` over every value in [lo, hi]: an object needs all of them."""
        inner = self._bounds(self.value_expr("x"), lo, hi, ctx)
        return (
            f"(not exists (select 1 from {ctx.table} x where {inner} and {ctx.visible_sql('x')} "
            f"and {self.value_expr('x')} is distinct from {self.value_expr()}) "
            f"and {self.match_range(lo, hi, ctx)})"
        )

    def _bounds(self, expr: str, lo: Any, hi: Any, ctx: QueryContext) -> str:
        parts = [f"{expr} is not null"]
        if lo is not None:
            parts.append(f"{expr} >= {ctx.params.add(lo, self.cast)}")
        if hi is not None:
            parts.append(f"{expr} <= {ctx.params.add(hi, self.cast)}")
        return all_of(parts)

    def exclude(self, not_values: list[Any], ctx: QueryContext) -> str:
        return f"({self.match_any(not_values, ctx)} is not true)"

    def condition(self, q: IndexQuery, ctx: QueryContext) -> str:
        not_values = q.get("not")
        if not_values is not None:
            not_values = [v for v in (self.convert_key(k) for k in not_values)
                          if v is not None and v is not _UNMATCHABLE]
        range_parm = q.get("range")
        is_range = bool(range_parm)
        if is_range and not isinstance(range_parm, str):
            # UnIndex calls range.find("min"): anything but a string raises there.
            raise QueryError(f"index {self.name!r}: range must be 'min', 'max' or 'min:max', got {range_parm!r}")

        if not q.keys and q.get("not") is not None and q.get("not") != []:
            return self._not_only(not_values or [], is_range, q, ctx)

        if is_range:
            result = self._range(q, str(range_parm), ctx)
        else:
            keys = [self.convert_key(k) for k in q.keys if k is not None]
            keys = [k for k in keys if k is not None]
            if q.operator == "and":
                if not keys:
                    # ZCatalog intersects nothing with the result so far.
                    result = "false" if ctx.is_first(self.name) else "true"
                elif any(k is _UNMATCHABLE for k in keys):
                    result = "false"
                else:
                    result = self.match_all(keys, ctx)
            else:
                result = self.match_any([k for k in keys if k is not _UNMATCHABLE], ctx)
        if not_values and not self.converts_keys:
            # Only a `not` on its own is converted to the stored form; next to keys or a range,
            # UnIndex looks the raw values up, which for converting indexes (dates) finds nothing.
            result = all_of([result, self.exclude(not_values, ctx)])
        return result

    def _range(self, q: IndexQuery, range_parm: str, ctx: QueryContext) -> str:
        keys = [self.convert_key(k) for k in q.keys]
        if any(k is _UNMATCHABLE for k in keys):
            raise QueryError(f"index {self.name!r}: range bound of the wrong type: {q.keys!r}")
        if not keys:
            raise QueryError(f"index {self.name!r}: a range query needs at least one value")
        if all(k is None for k in keys):
            lo = hi = None
        elif any(k is None for k in keys):
            raise QueryError(f"index {self.name!r}: None cannot be compared in a range: {q.keys!r}")
        else:
            try:
                lo = min(keys) if "min" in range_parm else None
                hi = max(keys) if "max" in range_parm else None
            except TypeError as exc:
                raise QueryError(f"index {self.name!r}: range values are not comparable: {q.keys!r}") from exc
        if not hi:
            hi = None  # ZCatalog: `if hi: values(lo, hi) else: values(lo)`
        if q.operator == "and":
            return self.match_range_all(lo, hi, ctx)
        return self.match_range(lo, hi, ctx)

    def _not_only(self, not_values: list[Any], is_range: bool, q: IndexQuery, ctx: QueryContext) -> str:
        if is_range or q.operator == "and":
            # Keys become "every value in the index but these": objects with some other value.
            return all_of([self.has_value, self.exclude(not_values, ctx)])
        if not not_values:
            return self.has_value
        probe = self.match_any(not_values, ctx, alias="x")
        return (
            f"(case when exists (select 1 from {ctx.table} x where {probe} and {ctx.visible_sql('x')}) "
            f"then {self.exclude(not_values, ctx)} else {self.has_value} end)"
        )


class ScalarIndex(UnIndex):
    """One value per object (FieldIndex, UUIDIndex, DateIndex), typed by ``value_type``."""

    type_name = "FieldIndex"

    def __init__(self, decl):
        super().__init__(decl)
        self.value_type = decl.value_type
        self.cast = {"text": "text", "datetime": "text", "number": "numeric", "boolean": "boolean"}[
            self.value_type
        ]

    def value_expr(self, alias: str = "o") -> str:
        raw = f"({alias}.idx->>{self.key})"
        if self.cast == "text":
            return f'({raw} collate "C")'
        return f"({raw}::{self.cast})"

    def stored(self, value: Any) -> Any:
        if value is None:
            return MISSING
        return self._coerce(value, stored=True)

    def convert_key(self, key: Any) -> Any:
        if key is None:
            return None
        try:
            return self._coerce(key, stored=False)
        except BadValue:
            return _UNMATCHABLE

    def _coerce(self, value: Any, stored: bool) -> Any:
        vt = self.value_type
        if isinstance(value, (list, dict)):  # a tuple: `list | dict` would make a union per call
            raise BadValue(f"index {self.name!r} holds one value per object, not {type(value).__name__}")
        if vt == "text":
            if isinstance(value, str):
                return check_key_size(value, "a value of index %r", self.name) if stored else value
            if stored:
                raise BadValue(f"index {self.name!r} holds text, got {value!r}")
            raise BadValue("wrong type")
        if vt == "number":
            if isinstance(value, bool):
                return int(value)
            if isinstance(value, int | float):
                return value
            raise BadValue(f"index {self.name!r} holds numbers, got {value!r}")
        if vt == "boolean":
            if isinstance(value, bool):
                return value
            if isinstance(value, int) and value in (0, 1):
                return bool(value)
            raise BadValue(f"index {self.name!r} holds booleans, got {value!r}")
        from .dates import BadDate, iso_utc

        try:
            return iso_utc(value)
        except BadDate as exc:
            raise BadValue(str(exc)) from exc

    def ddl(self, table: str) -> list[str]:
        # The rid after the value: sorted results break ties by rid (ZCatalog's order), so a
        # page of a sort with many equal keys (dates to the minute, after an import) is read
        # straight from the index instead of sorting every tie.
        expr = self.value_expr("x").replace("x.idx", "idx")
        return [f"create index if not exists {self.index_name(table, 'r')} on {table} ({expr}, rid)"]

    superseded = ("v",)  # the value alone (before the rid was added)

    def sort_expr(self) -> str:
        return self.value_expr()

    def unique_values_sql(self, table: str) -> str:
        return (f"select {self.value_expr()} as sortkey, o.idx->{self.key} as value, count(*) as objects "
                f"from {table} o where o.idx ? {self.key} group by 1, 2 order by 1")


class FieldIndex(ScalarIndex):
    type_name = "FieldIndex"


class UUIDIndex(ScalarIndex):
    type_name = "UUIDIndex"


class KeywordIndex(UnIndex):
    """Many values per object, stored as a JSON array of distinct values."""

    type_name = "KeywordIndex"
    query_options = ("query", "range", "not", "operator")
    multi_valued = True
    sortable = True

    def __init__(self, decl):
        super().__init__(decl)
        self.value_type = decl.value_type
        self.text = decl.value_type in ("text", "datetime")
        self.cast = "text" if self.text else "numeric"

    def stored(self, value: Any) -> Any:
        # KeywordIndex._get_object_keywords: falsy -> nothing; a string is one keyword.
        if not value:
            return MISSING
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            value = [value]
        out = []
        for v in value:
            if v is None:
                continue
            if self.text and not isinstance(v, str):
                raise BadValue(f"index {self.name!r} holds text keywords, got {v!r}")
            if not self.text and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise BadValue(f"index {self.name!r} holds numeric keywords, got {v!r}")
            out.append(v)
        if not out:
            return MISSING
        return sorted(set(out))

    def convert_key(self, key: Any) -> Any:
        if key is None:
            return None
        if self.text:
            return key if isinstance(key, str) else _UNMATCHABLE
        if isinstance(key, bool):
            return int(key)
        return key if isinstance(key, int | float) else _UNMATCHABLE

    def sort_expr(self) -> str:
        # ZCatalog sorts by the object's keyword list in set order, which varies between
        # processes; the sorted list is the deterministic equivalent (the same for one keyword).
        if self.text:
            return f'(catalog_text_array(o.idx->{self.key}) collate "C")'
        return f"catalog_numeric_array(o.idx->{self.key})"

    def element_expr(self, element: str) -> str:
        if self.text:
            return f'(({element} #>> \'{{}}\') collate "C")'
        return f"(({element} #>> '{{}}')::numeric)"

    def match_any(self, values, ctx, alias="o"):
        if not values:
            return "false"
        if self.text:
            return f"({alias}.idx->{self.key} ?| {ctx.params.add(values, 'text[]')})"
        p = ctx.params.add(values, "numeric[]")
        return (f"exists (select 1 from jsonb_array_elements({alias}.idx->{self.key}) e "
                f"where {self.element_expr('e')} = any({p}))")

    def match_all(self, values, ctx):
        if self.text:
            return f"({self.json} ?& {ctx.params.add(list(dict.fromkeys(values)), 'text[]')})"
        import orjson

        return f"({self.json} @> {ctx.params.add(orjson.dumps(sorted(set(values))).decode(), 'jsonb')})"

    def match_range(self, lo, hi, ctx):
        inner = self._bounds(self.element_expr("e"), lo, hi, ctx)
        return f"exists (select 1 from jsonb_array_elements(o.idx->{self.key}) e where {inner})"

    def match_range_all(self, lo, hi, ctx):
        inner = self._bounds(self.element_expr("e"), lo, hi, ctx)
        return (
            f"(not exists (select 1 from {ctx.table} x, jsonb_array_elements(x.idx->{self.key}) e "
            f"where {inner} and {ctx.visible_sql('x')} and not (o.idx->{self.key} @> jsonb_build_array(e))) "
            f"and {self.match_range(lo, hi, ctx)})"
        )

    def ddl(self, table: str) -> list[str]:
        if self.name == "allowedRolesAndUsers":
            # Security is filtered on the row's `allowed` column, never through an index: it
            # matches most rows, and an index on it misleads the planner (docs/decisions/0001).
            return []
        return [f"create index if not exists {self.index_name(table, 'g')} on {table} "
                f"using gin ((idx->{self.key}))"]

    def unique_values_sql(self, table: str) -> str:
        # Keywords are stored distinct per object, so a value's rows count its objects.
        return (f"select {self.element_expr('e')} as sortkey, e as value, count(*) as objects from {table} o, "
                f"jsonb_array_elements(o.idx->{self.key}) e group by 1, 2 order by 1")
