"""A public query's values typed per index, as plone.restapi's query parsers type them, and its
names checked: a name that is no index, option or known field is refused with the valid names.

plone.restapi (``plone/restapi/search/query.py``) turns ZCTextIndex, UUIDIndex and path values
into text, BooleanIndex values through ``boolean_value``, date index values into ``DateTime``,
``b_start``/``b_size``/``sort_limit`` into integers, and leaves Field and Keyword values as they
come. Here Field and Keyword values given as text are typed by the index's declared
``value_type`` too (a FieldIndex of numbers queried with ``3`` from a query string), and a
GopipIndex takes integers: plone.restapi has no parser for it and fails.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import BadRequest
from ..planner.plan import RESERVED, CatalogSchema
from .form import iso_date

TRUTHY = {"1", "y", "yes", "t", "true", "active", "enabled", "on"}
FALSY = {"0", "n", "no", "f", "false", "inactive", "disabled", "off"}

DATE_TYPES = {"DateIndex", "DateRangeIndex", "DateRecurringIndex"}
TEXT_TYPES = {"ZCTextIndex", "UUIDIndex", "ExtendedPathIndex", "PathIndex"}
PATH_TYPES = {"ExtendedPathIndex", "PathIndex"}
INT_OPTIONS = {"level", "depth", "navtree_start"}


class InvalidParameter(BadRequest):
    """A parameter names nothing the route knows, or its value does not fit its index."""

    title = "Invalid parameter"


def boolean_value(value, where: str) -> bool:
    """plone.base's ``boolean_value``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if value in (0, 1):
            return bool(value)
    else:
        text = str(value).strip().lower()
        if text in TRUTHY:
            return True
        if text in FALSY:
            return False
    raise InvalidParameter(f"{where}: {value!r} is no boolean", parameter=where)


def _number(value, where: str):
    if isinstance(value, bool):
        raise InvalidParameter(f"{where}: {value!r} is no number", parameter=where)
    if isinstance(value, int | float):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return float(value)
        except (TypeError, ValueError):
            raise InvalidParameter(f"{where}: {value!r} is no number", parameter=where) from None


def integer(value, where: str) -> int:
    if isinstance(value, bool):
        raise InvalidParameter(f"{where}: {value!r} is no integer", parameter=where)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidParameter(f"{where}: {value!r} is no integer", parameter=where) from None


def _date(value, where: str):
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value  # seconds since the epoch, as DateTime(number) reads them
    if not isinstance(value, str):
        raise InvalidParameter(f"{where}: {value!r} is no date", parameter=where)
    try:
        return iso_date(value)
    except ValueError as exc:
        raise InvalidParameter(f"{where}: {exc}", parameter=where) from exc


@dataclass(frozen=True)
class Site:
    """Where the site lies in the catalog's paths: ``path`` its physical path, or None when the
    catalog's settings name none (paths are then physical)."""

    path: str | None

    def physical(self, value: str) -> str:
        """A path of a query, relative to the site unless it begins with the site's path (so that
        both a frontend behind a virtual host and a caller knowing the physical path are read)."""
        if self.path is None or not isinstance(value, str):
            return value
        if value == self.path or value.startswith(self.path + "/"):
            return value
        rest = value.strip("/")
        return self.path + ("/" + rest if rest else "")


class QueryTyper:
    """Types and checks the index part of a public query against one catalog's schema."""

    def __init__(self, schema: CatalogSchema, declarations, site: Site, strict: bool):
        self.schema = schema
        self.types = {d.name: d for d in declarations}
        self.site = site
        self.strict = strict

    def value(self, name: str, value, where: str):
        decl = self.types[name]
        kind = decl.type
        if isinstance(value, list | tuple):
            return [self.value(name, v, where) for v in value]
        if value is None:
            return None
        if kind == "BooleanIndex":
            return boolean_value(value, where)
        if kind == "GopipIndex":
            return integer(value, where)
        if kind in DATE_TYPES:
            return _date(value, where)
        if kind in PATH_TYPES:
            return self.site.physical(str(value))
        if kind in TEXT_TYPES:
            return str(value)
        if isinstance(value, str):  # Field and Keyword indexes: typed by their declared values
            if decl.value_type == "number":
                return _number(value, where)
            if decl.value_type == "boolean":
                return boolean_value(value, where)
            if decl.value_type == "datetime":
                return _date(value, where)
        return value

    def options(self, name: str) -> tuple[str, ...]:
        return tuple(self.schema.indexes[name].query_options)

    def option(self, name: str, option: str, value, where: str):
        if option in ("query", "not"):
            return self.value(name, value, where)
        if option in INT_OPTIONS:
            return integer(value, where)
        if option == "navtree":
            return boolean_value(value, where)
        return value  # range, operator: text from a query string; other types are the index's to refuse

    def index_query(self, name: str, query):
        if not isinstance(query, dict):
            return self.value(name, query, name)
        typed = {}
        valid = self.options(name)
        for option, value in query.items():
            where = f"{name}.{option}"
            if option not in valid and self.schema.indexes[name].checks_options:
                if self.strict:
                    raise InvalidParameter(f"{where}: index {name!r} has no option {option!r}; valid: "
                                           f"{', '.join(valid)}", parameter=where, valid=list(valid))
                continue
            typed[option] = self.option(name, option, value, where)
        return typed

    def old_style_option(self, key: str) -> tuple[str, str] | None:
        """(index, option) of ZCatalog's ``{index}_{option}`` form (``path_depth``)."""
        for name in self.schema.indexes:
            if key.startswith(name + "_") and key[len(name) + 1:] in self.options(name):
                return name, key[len(name) + 1:]
        return None

    def query(self, query: dict, extra_names=()) -> dict:
        """The index terms of ``query`` typed, ZCatalog's own keys kept; other names refused
        (strict) or dropped. ``extra_names``: keys the caller handles itself, left as they are."""
        typed = {}
        for key, value in query.items():
            if key in extra_names:
                typed[key] = value
            elif key in self.schema.indexes:
                typed[key] = self.index_query(key, value)
            elif key in RESERVED:
                typed[key] = global_option(key, value)
            elif (old := self.old_style_option(key)) is not None:
                typed[key] = self.option(old[0], old[1], value, key)
            elif self.strict:
                valid = sorted(set(self.schema.indexes) | RESERVED | set(extra_names))
                raise InvalidParameter(f"parameter {key!r} names no index, option or field of this catalog; "
                                       f"valid: {', '.join(valid)}", parameter=key, valid=valid)
        return typed


def global_option(key: str, value):
    """plone.restapi's global query parameters: integers, and sort_on/sort_order as text or lists."""
    if key in ("b_start", "b_size", "sort_limit", "sort-limit"):
        return integer(value, key)
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return value if isinstance(value, str) else str(value)
