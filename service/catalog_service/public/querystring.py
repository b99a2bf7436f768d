"""plone.app.querystring criteria as a ZCatalog query, for ``/{catalog}/@querystring-search``.

A collection, a listing block or a plone.restapi ``@querystring-search`` request sends criteria
``[{"i": index, "o": operation, "v": value}, ...]`` plus ``sort_on``, ``sort_order`` and
``limit``. Plone turns them into a catalog query in two steps, both reproduced here:

- ``queryparser.parseFormquery``: one function per operation (the registry's
  ``plone.app.querystring.operation.*.operation`` records), path rows merged into one path
  query, range rows on one index merged into one range (:func:`parse_formquery`);
- ``QueryBuilder._makequery``: the navigation root's path added when no row names ``path``, the
  date index modifiers (strings parsed as dates), rows on unknown indexes ignored (none valid:
  no results), ``limit`` as ``sort_limit``, a ``custom_query`` laid over it, ``SearchableText``
  munged into prefix terms as Plone's search does (:func:`querystring_query`).

Both are pure: what Plone reads from its objects comes in a :class:`Place` (the site root, the
context, the navigation root, the caller's id and roles, the time and the zone of "today"), and
what Plone would look up in its catalog or object tree is asked of the caller as a
:class:`Lookup` (a generator yields it and receives the answer), so the same code serves a sync
test and the async service. Dates come out as aware ``datetime`` values; :func:`to_wire` writes
them as ISO 8601 for the service's query language.

Where Plone fails on a value (a server error there, or a KeyError that plone.restapi answers
with "Invalid query"), the service raises :class:`QuerystringError` (400) instead; docs/api.md
lists the operations and the differences.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, Collection, Generator, Mapping
from copy import deepcopy
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from typing import Any

from dateutil import parser as dateutil_parser

from ..errors import QueryError

PREFIX = "plone.app.querystring.operation."
PATH_INDEX = "path"
# Query keys ZCatalog and Plone's catalog tool read besides index names.
CONTROL_KEYS = frozenset({"sort_on", "sort_order", "sort_limit", "b_start", "b_size", "show_inactive"})
# plone.app.querystring's IParsedQueryIndexModifier utilities: DateIndexes whose string values
# are parsed with dateutil before the query runs.
DATE_MODIFIED_INDEXES = ("Date", "created", "effective", "end", "expires", "modified", "start")


class QuerystringError(QueryError):
    title = "Invalid querystring query"


class UnknownOperation(QuerystringError):
    title = "Unknown querystring operation"


class UnsupportedDate(QuerystringError):
    """A date Plone's DateTime may read but the service does not (only ISO 8601 and numbers)."""

    title = "Unsupported date"


@dataclass(frozen=True)
class Place:
    """Where and for whom the criteria are read: what Plone takes from its objects and request.

    ``tz`` is the zone of the Plone process (its DateTime's local zone): "today" and relative
    days begin at its midnight, and dates without a zone read by dateutil are in it.
    """

    site_root: str
    context: str
    now: datetime
    navigation_root: str | None = None
    user_id: str | None = None
    roles: tuple[str, ...] = ("Anonymous",)
    tz: tzinfo = UTC

    def __post_init__(self):
        if self.now.tzinfo is None:
            raise ValueError("Place.now must be an aware datetime")


def place_for_principals(site_root: str, context: str, principals: tuple[str, ...] | None, now: datetime,
                         navigation_root: str | None = None, tz: tzinfo = UTC) -> Place:
    """A :class:`Place` for a caller known by its catalog principals (Plone's
    ``_listAllowedRolesAndUsers``: ``["Anonymous"]``, or ``["user:<id>", <roles>..., "user:<group>"...,
    "Anonymous"]``, the user's own id first)."""
    principals = tuple(principals or ("Anonymous",))
    if principals == ("Anonymous",) or not principals[0].startswith("user:"):
        return Place(site_root, context, now, navigation_root, None, ("Anonymous",), tz)
    roles = tuple(p for p in principals[1:-1] if not p.startswith("user:"))
    return Place(site_root, context, now, navigation_root, principals[0][len("user:"):], roles, tz)


# -- lookups ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PathOfUid:
    """The path of the object with this UID, or None (an unrestricted search, as Plone's)."""

    uid: str


@dataclass(frozen=True)
class UidOfPath:
    """The UID of the object at this path that the caller may see, or None (Plone traverses
    with the caller's rights)."""

    path: str


@dataclass(frozen=True)
class IsObject:
    """Whether an object exists at this path (Plone walks its tree unrestricted)."""

    path: str


Lookup = PathOfUid | UidOfPath | IsObject
Steps = Generator[Lookup, Any, Any]


def run(steps: Steps, lookup: Callable[[Lookup], Any]):
    """Drive ``steps`` with a synchronous ``lookup``; return its result."""
    try:
        question = next(steps)
        while True:
            question = steps.send(lookup(question))
    except StopIteration as done:
        return done.value


async def run_async(steps: Steps, lookup: Callable[[Lookup], Awaitable[Any]]):
    """Drive ``steps`` with an asynchronous ``lookup`` (the service's catalog queries)."""
    try:
        question = next(steps)
        while True:
            question = steps.send(await lookup(question))
    except StopIteration as done:
        return done.value


# -- dates as Plone's DateTime reads them ---------------------------------------------------------

class _NotADate(Exception):
    """DateTime would raise DateTimeError: the operation's fallback applies."""


_ISO = re.compile(r"""
    (?P<y>\d{4})
    (?:-(?P<mo>\d{2})
      (?:-(?P<d>\d{2})
        (?:[T ](?P<h>\d{2})(?::(?P<mi>\d{2})(?::(?P<s>\d{2})(?:\.(?P<f>\d{1,9}))?)?)?
          (?P<tz>Z|[+-]\d{2}(?::?\d{2})?)?
        )?
      )?
    )?""", re.VERBOSE | re.ASCII)


def _zone(text: str | None) -> tzinfo:
    if not text or text == "Z":
        return UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:] or 0)
    # DateTime misreads offsets with minutes and knows no zone beyond twelve hours.
    if minutes or hours > 12:
        raise UnsupportedDate(f"time zone offset {text!r} is not supported; use whole hours up to 12")
    return timezone(sign * timedelta(hours=hours))


def datetime_of(value, place: Place) -> datetime:
    """``DateTime(value)`` as an aware datetime, for the values a querystring carries.

    ISO 8601 strings (a date, a time to the minute, second or fraction; a zone ``Z`` or a whole
    hour offset; none: UTC, as DateTime reads ISO dates), numbers as seconds since the epoch,
    None as now. Empty strings, strings without digits, lists and objects are no dates to
    DateTime (:class:`_NotADate`); other strings DateTime may read in ways of its own
    (``2025/01/15`` in the server's zone, ``1`` as today at one): refused with
    :class:`UnsupportedDate` rather than guessed.
    """
    if value is None:
        return place.now
    if isinstance(value, bool | int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise _NotADate
        try:
            return datetime.fromtimestamp(float(value), UTC)
        except (OverflowError, OSError, ValueError) as exc:
            raise UnsupportedDate(f"date {value!r} is out of range") from exc
    if not isinstance(value, str):
        raise _NotADate
    text = value.strip()
    if not any(ch.isdigit() for ch in text):
        raise _NotADate
    match = _ISO.fullmatch(text)
    if match is None:
        raise UnsupportedDate(f"{value!r} is no ISO 8601 date (YYYY-MM-DD, optionally with a time and zone)")
    parts = match.groupdict()
    fraction = parts["f"] or ""
    micros = round(int(fraction.ljust(9, "0")) / 1000) if fraction else 0
    try:
        moment = datetime(int(parts["y"]), int(parts["mo"] or 1), int(parts["d"] or 1),
                          int(parts["h"] or 0), int(parts["mi"] or 0), int(parts["s"] or 0),
                          tzinfo=_zone(parts["tz"]))
    except ValueError as exc:  # DateTime's DateError / TimeError
        raise _NotADate from exc
    if moment.year < 1583:
        # DateTime counts days of the Julian calendar before the Gregorian one began.
        raise UnsupportedDate(f"{value!r}: dates before 1583 are not supported")
    if micros:
        moment += timedelta(microseconds=micros)
    return moment


def _earliest(moment: datetime, place: Place) -> datetime:
    """DateTime.earliestTime(): midnight of the moment's day in the place's zone."""
    day = moment.astimezone(place.tz).date()
    return datetime.combine(day, time(), tzinfo=place.tz).astimezone(UTC)


def _latest(moment: datetime, place: Place) -> datetime:
    """DateTime.latestTime(): 23:59:59 of the moment's day in the place's zone."""
    day = moment.astimezone(place.tz).date()
    return datetime.combine(day, time(23, 59, 59), tzinfo=place.tz).astimezone(UTC)


def _days(moment: datetime, days: int) -> datetime:
    """DateTime + days: elapsed time, not wall-clock time."""
    try:
        return moment.astimezone(UTC) + timedelta(days=days)
    except OverflowError as exc:
        raise QuerystringError(f"{days} days from now is out of range") from exc


def _int_or_zero(value) -> int:
    """``int(row.values)`` with ValueError read as 0, as the relative date operations do (a
    TypeError fails in Plone; here it is a 400)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise QuerystringError(f"not a number of days: {value!r}")
    try:
        return int(value)
    except ValueError:
        return 0
    except TypeError as exc:
        raise QuerystringError(f"not a number of days: {value!r}") from exc


def _int_or_none(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    try:
        return int(value)
    except (ValueError, TypeError, AttributeError):
        return None


# -- the operations --------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Row:
    index: Any
    values: Any


def _equal(row, place):
    return {row.index: {"query": row.values}}


def _excludes(row, place):
    return {row.index: {"not": row.values}}


def _all(row, place):
    return {row.index: {"query": row.values, "operator": "and"}}


def _int_equal(row, place):
    if type(row.values) is list:
        values = [_int_or_none(v) for v in row.values]
        values = None if None in values else values
    else:
        values = _int_or_none(row.values)
    return {} if values is None else {row.index: {"query": values}}


def _is_true(row, place):
    return {row.index: {"query": True}}


def _is_false(row, place):
    return {row.index: {"query": False}}


def _between(index, values):
    try:
        return {index: {"query": sorted(values), "range": "minmax"}}
    except TypeError as exc:
        raise QuerystringError(f"cannot order the bounds of {index!r}") from exc


def _range(index, value, bound):
    return {index: {"query": value, "range": bound}}


def _date_between(row, place):
    if not isinstance(row.values, list | tuple) or len(row.values) < 2:
        raise QuerystringError("date.between needs a list of two dates")
    try:
        start = datetime_of(row.values[0], place)
    except _NotADate:
        start = datetime(1970, 1, 1, tzinfo=UTC)
    try:
        end = datetime_of(row.values[1], place)
    except _NotADate:
        end = place.now
    return _between(row.index, [start, end])


def _int_bound(bound):
    def operation(row, place):
        value = _int_or_none(row.values)
        return {} if value is None else _range(row.index, value, bound)
    return operation


def _date_bound(bound):
    def operation(row, place):
        try:
            value = datetime_of(row.values, place)
        except _NotADate:
            return {}
        return _range(row.index, value, bound)
    return operation


def _current_user(row, place):
    return {row.index: {"query": place.user_id}}


def _show_inactive(row, place):
    wanted = row.values
    if not wanted:
        return {row.index: False}
    try:
        return {row.index: any(role in wanted for role in place.roles)}
    except TypeError as exc:
        raise QuerystringError("showInactive needs a list of roles") from exc


def _less_than_relative(row, place):
    """Between today and the end of the N-th day from now."""
    days = _int_or_zero(row.values)
    return _between(row.index, [_earliest(place.now, place), _latest(_days(place.now, days), place)])


def _more_than_relative(row, place):
    """Between the start of the N-th day before now and the end of today."""
    days = _int_or_zero(row.values)
    return _between(row.index, [_earliest(_days(place.now, -days), place), _latest(place.now, place)])


def _today(row, place):
    return _between(row.index, [_earliest(place.now, place), _latest(place.now, place)])


def _after_today(row, place):
    return _range(row.index, place.now, "min")


def _before_today(row, place):
    return _range(row.index, place.now, "max")


def _before_relative(row, place):
    return _range(row.index, _days(_earliest(place.now, place), -_int_or_zero(row.values)), "max")


def _after_relative(row, place):
    return _range(row.index, _days(_earliest(place.now, place), _int_or_zero(row.values)), "min")


def _path_parts(values) -> tuple[str, int | None, str]:
    """``path::depth`` split as Plone does: the path, the depth (None when absent or no
    integer) and the ``::depth`` text."""
    if not isinstance(values, str):
        raise QuerystringError(f"a path criterion needs a string, not {values!r}")
    if "::" not in values:
        return values, None, ""
    path, depth_text = values.split("::", 1)
    return path, _int_or_none(depth_text), "::" + depth_text


def _path_by_root(root: str, row) -> Steps:
    values, depth, _ = _path_parts(row.values)
    if "/" not in values:  # a UID
        if not values.strip():
            # Plone would search the catalog for UID "" (no condition) and take the first brain.
            raise QuerystringError("a path criterion needs a path or a UID")
        values = (yield PathOfUid(values)) or ""
    if not values.startswith(root + "/") and values != root:
        values = root + values
    query: dict = {}
    if depth is not None:
        query["depth"] = depth
        # With a depth, a trailing slash would change the query.
        values = values.rstrip("/")
    query["query"] = [values]
    return {row.index: query}


def _absolute_path(row, place) -> Steps:
    return (yield from _path_by_root(place.site_root, row))


def _navigation_path(row, place) -> Steps:
    return (yield from _path_by_root(place.navigation_root or place.site_root, row))


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _relative_path(row, place) -> Steps:
    """Walk from the context: ``..`` to the parent (never above the site), a name into the child
    of that name where one exists."""
    values, _, depth_text = _path_parts(row.values)
    here = place.context
    for name in (part for part in values.split("/") if part):
        if name == "..":
            if here == place.site_root:
                break
            here = _parent(here)
        elif (yield IsObject(here.rstrip("/") + "/" + name)):
            here = here.rstrip("/") + "/" + name
    return (yield from _absolute_path(_Row(row.index, here + depth_text), place))


def _reference_is(row, place) -> Steps:
    if not row.values:
        return {}
    if not isinstance(row.values, str):
        raise QuerystringError("reference.is needs a UID or a path")
    values = row.values.split("::")[0]
    if "/" not in values:
        return {row.index: values}
    resolved = yield from _absolute_path(row, place)
    uid = yield UidOfPath(resolved[row.index]["query"][0].rstrip("/") or "/")
    return {} if uid is None else {row.index: uid}


def _missing(name):
    def operation(row, place):
        raise UnknownOperation(f"{name} names no implementation in plone.app.querystring "
                               f"(its registry points at a function that does not exist)",
                               operation=PREFIX + name)
    return operation


# Every operation plone.app.querystring's registry profile declares, by the registry's name.
OPERATIONS: dict[str, Callable] = {
    "boolean.isTrue": _is_true,
    "boolean.isFalse": _is_false,
    "int.is": _int_equal,
    "int.lessThan": _int_bound("max"),
    "int.largerThan": _int_bound("min"),
    "intselection.is": _int_equal,
    "date.lessThan": _date_bound("max"),
    "date.largerThan": _date_bound("min"),
    "date.between": _date_between,
    "date.lessThanRelativeDate": _less_than_relative,
    "date.largerThanRelativeDate": _more_than_relative,
    "date.today": _today,
    "date.afterToday": _after_today,
    "date.beforeToday": _before_today,
    "date.beforeRelativeDate": _before_relative,
    "date.afterRelativeDate": _after_relative,
    "list.contains": _equal,
    "string.contains": _equal,
    "string.is": _equal,
    "string.isNot": _excludes,
    "string.currentUser": _current_user,
    "string.showInactive": _show_inactive,
    "string.absolutePath": _absolute_path,
    "string.path": _navigation_path,
    "string.relativePath": _relative_path,
    "selection.is": _equal,
    "selection.any": _equal,
    "selection.all": _all,
    "selection.none": _excludes,
    "reference.is": _reference_is,
    # Declared, but their functions (_pathContains, _pathContainsRelative) do not exist.
    "path.isWithin": _missing("path.isWithin"),
    "path.isWithinRelative": _missing("path.isWithinRelative"),
}


def _operation(name) -> Callable:
    short = name[len(PREFIX):] if isinstance(name, str) and name.startswith(PREFIX) else None
    if short not in OPERATIONS:
        raise UnknownOperation(f"unknown operation {name!r}", operation=name,
                               valid=sorted(PREFIX + op for op in OPERATIONS))
    return OPERATIONS[short]


def _apply(operation, row, place) -> Steps:
    result = operation(row, place)
    if isinstance(result, Generator):
        result = yield from result
    return result


# -- parseFormquery --------------------------------------------------------------------------------

def _rows(criteria) -> list[dict]:
    if not isinstance(criteria, list | tuple):
        raise QuerystringError("query must be a list of criteria")
    rows = []
    for row in criteria:
        if not isinstance(row, Mapping):
            raise QuerystringError(f"a criterion must be an object with i, o and v: {row!r}")
        index = row.get("i")
        if not isinstance(index, str):
            raise QuerystringError(f"a criterion's index (i) must be a string: {row!r}")
        rows.append(dict(row))
    return rows


def parse_formquery(criteria, place: Place, sort_on=None, sort_order=None) -> Steps:
    """plone.app.querystring's ``parseFormquery``: the criteria as a ZCatalog query.

    A generator: yields :class:`Lookup` questions, returns the query dict (see :func:`run`).
    """
    if not criteria:
        return {}
    rows = _rows(deepcopy(criteria))
    query: dict = {}
    row = None
    for raw in rows:
        operation = _operation(raw.get("o"))
        row = _Row(raw["i"], raw.get("v"))
        parsed = yield from _apply(operation, row, place)

        if PATH_INDEX in parsed:
            # Every path row adds its paths to the first one's query (the first depth stays).
            if PATH_INDEX in query:
                try:
                    query[PATH_INDEX]["query"].extend(parsed[PATH_INDEX]["query"])
                except (KeyError, TypeError, AttributeError) as exc:
                    raise QuerystringError("these path criteria cannot be combined") from exc
            else:
                query.update(parsed)
            continue

        for index, value in parsed.items():
            existing = query.get(index)
            if isinstance(value, dict) and "range" in value and isinstance(existing, dict) and "range" in existing:
                # Two bounds on one index: one range over both.
                before = existing["query"] if isinstance(existing["query"], list) else [existing["query"]]
                added = value["query"] if isinstance(value["query"], list) else [value["query"]]
                try:
                    existing["query"] = sorted(before + added)
                except TypeError as exc:
                    raise QuerystringError(f"cannot order the bounds of {index!r}") from exc
                if {existing["range"], value["range"]} == {"min", "max"}:
                    existing["range"] = "minmax"
                continue
            query[index] = value

    if not query:
        # Nothing came of the rows: the last one as an equality query.
        query = _equal(row, place)
    if sort_on:
        query["sort_on"] = sort_on
        if sort_order:
            query["sort_order"] = sort_order
    return query


# -- QueryBuilder ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class QuerystringQuery:
    """What QueryBuilder asks of the catalog.

    ``empty``: no criterion names an index, and Plone answers no results without a search.
    ``limit``: the result's total is capped at it (the query's ``sort_limit`` keeps the rest).
    """

    query: dict
    empty: bool
    limit: int | None = None


def _enforce_navigation_root(rows: list[dict]) -> list[dict]:
    """plone.app.querystring's query modifier: criteria without a path row search the navigation
    root."""
    if not rows or any(row.get("i") == PATH_INDEX for row in rows):
        return rows
    return [*rows, {"i": PATH_INDEX, "o": PREFIX + "string.path", "v": "/"}]


def _naive_as_local(value, place: Place):
    """A date index reads a naive datetime in the server's zone."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=place.tz)
    return value


def _modify_dates(value, place: Place):
    """The date index modifiers: string values parsed by dateutil (failures kept as they are)."""
    if not isinstance(value, dict) or "query" not in value:
        raise QuerystringError("a date index's criterion must be a query with values")
    default = datetime.combine(place.now.astimezone(place.tz).date(), time())

    def normalize(item):
        if isinstance(item, str):
            try:
                return _naive_as_local(dateutil_parser.parse(item, default=default), place)
            except (ValueError, OverflowError, dateutil_parser.ParserError):
                return item
        return item

    query = value["query"]
    value["query"] = [normalize(item) for item in query] if isinstance(query, list) else normalize(query)
    return value


def munge_search_term(text: str) -> str:
    """Plone's ``munge_search_term``: quoted phrases kept, every other term a prefix search, the
    words and/or/not and parentheses quoted, all joined with AND."""
    for char in ("?", "-", "+", "*", "\u3000"):
        text = text.replace(char, " ")
    terms = []
    for phrase in re.findall(r'"([^"]*)"', text):
        text = text.replace(f'"{phrase}"', "")
        if phrase.strip():
            terms.append(f'"{phrase.strip()}"')
    for word in text.split():
        if word.lower() in ("and", "or", "not"):
            word = f'"{word}"'
        quoted = word.replace("(", '"("').replace(")", '")"')
        terms.append(quoted if quoted.startswith('"') else quoted + "*")
    return " AND ".join(terms)


def querystring_query(criteria, place: Place, indexes: Collection[str], sort_on=None, sort_order=None,
                      limit: int | None = None, custom_query: Mapping | None = None) -> Steps:
    """QueryBuilder's query for the criteria (a generator, see :func:`run`).

    ``indexes``: the catalog's index names. ``custom_query`` is laid over the parsed query as
    plone.restapi does (``{"UID": {"not": <context UID>}}`` when the context is no site root).
    Keys that name no index are dropped (ZCatalog ignores them), and so are sort indexes that do
    not exist (Plone's catalog tool drops them).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise QuerystringError("limit must be an integer")
    rows = _enforce_navigation_root(_rows(deepcopy(criteria)) if criteria else [])
    parsed = yield from parse_formquery(rows, place, sort_on, sort_order)
    for name in DATE_MODIFIED_INDEXES:
        if name in parsed:
            parsed[name] = _modify_dates(parsed[name], place)

    empty = not any(key in indexes for key in parsed)
    if empty:
        parsed = {}
    if limit:
        parsed["sort_limit"] = limit
    if custom_query:
        for key, value in deepcopy(dict(custom_query)).items():
            if isinstance(parsed.get(key), dict) and isinstance(value, dict):
                parsed[key].update(value)
            else:
                parsed[key] = value
        empty = False

    text = parsed.get("SearchableText")
    if isinstance(text, dict):
        text = text.get("query", "")
    if text:
        if not isinstance(text, str):
            raise QuerystringError("SearchableText must be a string")
        parsed["SearchableText"] = munge_search_term(text)

    query = {key: value for key, value in parsed.items() if key in indexes or key in CONTROL_KEYS}
    _keep_valid_sort(query, indexes)
    return QuerystringQuery(query=query, empty=empty, limit=limit or None)


def _keep_valid_sort(query: dict, indexes: Collection[str]) -> None:
    sort_on = query.get("sort_on")
    if sort_on is None:
        query.pop("sort_order", None)
        return
    names = [sort_on] if isinstance(sort_on, str) else sort_on
    valid = [name for name in names if name in indexes] if isinstance(names, list | tuple) else []
    if not valid:
        del query["sort_on"]
        query.pop("sort_order", None)
    else:
        query["sort_on"] = valid if len(valid) > 1 or not isinstance(sort_on, str) else valid[0]


def to_wire(value):
    """The query in the service's JSON form: datetimes as ISO 8601 with their offset."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: to_wire(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_wire(item) for item in value]
    return value
