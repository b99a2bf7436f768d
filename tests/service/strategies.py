"""Hypothesis strategies for Plone-like content and the catalog queries Plone sends.

Objects are ``CatalogObject``s holding Python values the way Plone's indexers return them
(``DateTime``, lists of strings, booleans, ints, ``None``); ``to_wire`` turns them into the
service's JSON (docs/api.md). Queries are ZCatalog query dicts with Python values; ``query_to_wire``
turns them into JSON. The oracle gets the Python values, the service the JSON, so the conversion
itself is under test too.

Query values are mostly drawn from the generated objects, so that queries hit something.
"""

from __future__ import annotations

import datetime
import types
from typing import Any

import pytz
from DateTime import DateTime
from hypothesis import strategies as st

from catalog_schemas.api import IndexDeclaration
from plone_connector.catalog.extraction import recurrence_value
from plone_connector.catalog.wire import iso_datetime, query_value
from tests.service.oracle import CatalogObject, recurrence_attrs

ROOT = "/plone"

# The catalog every generated case runs against: Plone's own index types and names
# (Products/CMFPlone/profiles/default/catalog.xml), plus a recurring-event start.
INDEXES: list[IndexDeclaration] = [
    IndexDeclaration(name="portal_type", type="FieldIndex"),
    IndexDeclaration(name="review_state", type="FieldIndex"),
    IndexDeclaration(name="sortable_title", type="FieldIndex"),
    IndexDeclaration(name="getId", type="FieldIndex"),
    IndexDeclaration(name="Subject", type="KeywordIndex"),
    IndexDeclaration(name="is_folderish", type="BooleanIndex"),
    IndexDeclaration(name="exclude_from_nav", type="BooleanIndex"),
    IndexDeclaration(name="UID", type="UUIDIndex"),
    IndexDeclaration(name="created", type="DateIndex"),
    IndexDeclaration(name="modified", type="DateIndex"),
    IndexDeclaration(name="effective", type="DateIndex"),
    IndexDeclaration(name="expires", type="DateIndex"),
    IndexDeclaration(
        name="effectiveRange", type="DateRangeIndex", since_field="effective", until_field="expires"
    ),
    IndexDeclaration(name="path", type="ExtendedPathIndex"),
    IndexDeclaration(name="SearchableText", type="ZCTextIndex", lexicon_id="plone_lexicon"),
    IndexDeclaration(name="Title", type="ZCTextIndex", lexicon_id="plone_lexicon"),
    IndexDeclaration(name="start", type="DateRecurringIndex"),
    IndexDeclaration(name="getObjPositionInParent", type="GopipIndex", value_type="number"),
]
METADATA = ["Title", "portal_type", "review_state", "getId"]
INDEX_BY_NAME = {decl.name: decl for decl in INDEXES}
# Keyword and recurring indexes hold several keys per object; ZCatalog sorts on them but
# inconsistently (duplicates in one sort algorithm), and Plone never does. An edge case covers it.
SORTABLE = [
    decl.name
    for decl in INDEXES
    if decl.type
    not in (
        "ZCTextIndex",
        "DateRangeIndex",
        "ExtendedPathIndex",
        "PathIndex",
        "KeywordIndex",
        "DateRecurringIndex",
    )
]

# Zope ids hold spaces, %, _, . and non-ASCII letters; these are data, never patterns.
ID_CHARS = "ab_%. -zéÜ中"
ids = st.text(ID_CHARS, min_size=1, max_size=6).filter(lambda s: s.strip(" .") == s and s != "")

PORTAL_TYPES = ["Document", "Folder", "News Item", "Event", "Dokumént"]
STATES = ["private", "published", "pending"]
SUBJECTS = ["Plone", "plone", "Ünïcode", "a b", "x_y", "100%", "日本", "éé"]
TITLES = ["Alpha", "alpha", "Été", "ete", "b", "Zoë", "über", "%_x", "a b", ""]
WORDS = [
    "plone", "Plone", "café", "cafe", "Crème", "brûlée", "news", "newsletter", "new", "folder",
    "Földer", "x_y", "100%", "日本語", "東京", "and", "or", "not", "über", "uber",
]  # fmt: skip
ZONES = ["UTC", "GMT+2", "GMT-5", "Europe/Berlin", "US/Eastern", "Asia/Kolkata", "GMT+13"]


@st.composite
def datetimes(draw, zones=ZONES) -> DateTime:
    """A Zope DateTime at whole seconds in one of a few time zones, 2019–2026."""
    day = draw(st.dates(datetime.date(2019, 1, 1), datetime.date(2026, 12, 31)))
    hour = draw(st.integers(0, 23))
    minute = draw(st.sampled_from([0, 0, 15, 30, 59]))
    second = draw(st.sampled_from([0, 0, 30, 59]))
    zone = draw(st.sampled_from(zones))
    return DateTime(day.year, day.month, day.day, hour, minute, second, zone)


# Recurring events: zones with summer time on both hemispheres and fixed offsets (GMT+2 is no pytz
# zone, so plone.event expands it in UTC).
RECURRENCE_ZONES = ["Europe/Berlin", "America/New_York", "US/Eastern", "Australia/Sydney", "UTC", "GMT+2", "GMT-5"]
FIXED_OFFSETS = {"UTC": 0, "GMT+2": 120, "GMT-5": -300}


def _wall(value) -> datetime.datetime:
    """The naive wall-clock time of a DateTime or datetime in its own zone."""
    if isinstance(value, DateTime):
        return datetime.datetime(*value.parts()[:5], int(value.second()))
    return value.replace(tzinfo=None)


def at_wall(zone: str, wall: datetime.datetime, python: bool):
    """``wall`` in ``zone`` as a Zope DateTime, or as a python datetime the way plone.app.event
    stores an event's start (a pytz zone, localized)."""
    if not python:
        return DateTime(wall.year, wall.month, wall.day, wall.hour, wall.minute, wall.second, zone)
    if zone in FIXED_OFFSETS:
        return pytz.FixedOffset(FIXED_OFFSETS[zone]).localize(wall)
    return pytz.timezone(zone).localize(wall)


def shift_days(value, days: int):
    """``value`` moved by whole days of wall-clock time in its own zone (where a recurring
    event's occurrences fall), as the same kind of value."""
    if isinstance(value, DateTime):
        wall = _wall(value) + datetime.timedelta(days=days)
        return at_wall(value.timezone(), wall, python=False)
    if getattr(value.tzinfo, "zone", None):
        return value.tzinfo.localize(_wall(value) + datetime.timedelta(days=days))
    return value + datetime.timedelta(days=days)


@st.composite
def recurrence_starts(draw):
    """An event start, often within weeks before a change of summer time, at any hour (the hours
    skipped and repeated by the change included), as a DateTime or a pytz datetime."""
    year = draw(st.integers(2019, 2026))
    if draw(st.integers(0, 3)):
        # March/April and October/November: the changes in Europe, North America and Australia.
        month = draw(st.sampled_from([3, 4, 10, 11]))
        day = datetime.date(year, month, 1) - datetime.timedelta(days=draw(st.integers(-28, 21)))
    else:
        day = draw(st.dates(datetime.date(year, 1, 1), datetime.date(year, 12, 31)))
    wall = datetime.datetime(day.year, day.month, day.day, draw(st.integers(0, 23)),
                             draw(st.sampled_from([0, 0, 30, 59])), draw(st.sampled_from([0, 0, 30])))
    return at_wall(draw(st.sampled_from(RECURRENCE_ZONES)), wall, python=draw(st.booleans()))


def _rrule_until(start, days: int) -> str:
    utc = start.toZone("UTC") if isinstance(start, DateTime) else start.astimezone(datetime.UTC)
    return (_wall(utc) + datetime.timedelta(days=days)).strftime("%Y%m%dT%H%M00Z")


@st.composite
def recurrences(draw, start) -> str:
    """An RRULE bounded by COUNT or UNTIL, sometimes with EXDATEs on generated occurrences."""
    freq = draw(st.sampled_from(["DAILY", "DAILY", "WEEKLY", "WEEKLY", "MONTHLY"]))
    interval = draw(st.integers(1, 3))
    if draw(st.booleans()):
        bound = f"COUNT={draw(st.integers(1, 12))}"
    else:
        bound = f"UNTIL={_rrule_until(start, draw(st.integers(0, 90)))}"
    rule = f"RRULE:FREQ={freq};INTERVAL={interval};{bound}"
    if freq != "MONTHLY" and draw(st.booleans()):
        # plone.event gives every EXDATE the start's wall-clock time and ignores a trailing Z,
        # so an EXDATE names a local day; sometimes the start's UTC day, which may be another.
        step_days = interval * (7 if freq == "WEEKLY" else 1)
        utc = start.toZone("UTC") if isinstance(start, DateTime) else start.astimezone(datetime.UTC)
        base = _wall(start) if draw(st.integers(0, 3)) else _wall(utc)
        skipped = sorted(set(draw(st.lists(st.integers(0, 11), min_size=1, max_size=3))))
        exdates = [(base + datetime.timedelta(days=step * step_days)).strftime("%Y%m%dT%H%M%S")
                   + draw(st.sampled_from(["", "Z"])) for step in skipped]
        rule += "\nEXDATE:" + ",".join(exdates)
    return rule


def _maybe(draw, strategy, absent=0.1, none=0.1):
    """Draw a value, or None, or the marker for 'attribute missing'."""
    roll = draw(st.floats(0, 1))
    if roll < absent:
        return _ABSENT
    if roll < absent + none:
        return None
    return draw(strategy)


_ABSENT = object()


@st.composite
def plone_objects(draw, min_size=1, max_size=12) -> list[CatalogObject]:
    """A small content tree under /plone: nested folders, Plone-ish attributes."""
    count = draw(st.integers(min_size, max_size))
    folders = [ROOT]
    children: dict[str, list[str]] = {ROOT: []}
    objects: list[CatalogObject] = []
    for number in range(count):
        parent = draw(st.sampled_from(folders))
        taken = set(children[parent])
        oid = draw(ids.filter(lambda s, taken=taken: s not in taken))
        path = f"{parent}/{oid}"
        position = len(children[parent])
        children[parent].append(oid)
        folderish = draw(st.booleans())
        if folderish:
            folders.append(path)
            children[path] = []
        uid = f"{number:04d}" + draw(st.text("0123456789abcdef", min_size=28, max_size=28))
        attrs: dict[str, Any] = {
            "UID": uid,
            "getId": oid,
            "is_folderish": folderish,
            "getObjPositionInParent": position,
        }
        candidates = {
            "portal_type": st.sampled_from(PORTAL_TYPES),
            "review_state": st.sampled_from(STATES),
            "sortable_title": st.sampled_from(TITLES),
            "Subject": st.lists(st.sampled_from(SUBJECTS), max_size=3),
            "exclude_from_nav": st.booleans(),
            "created": datetimes(),
            "modified": datetimes(),
            "effective": datetimes(),
            "expires": datetimes(),
            "Title": st.sampled_from(TITLES),
            "SearchableText": st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join),
        }
        for name, strategy in candidates.items():
            value = _maybe(draw, strategy)
            if value is not _ABSENT:
                attrs[name] = value
        if draw(st.booleans()):
            start = draw(recurrence_starts())
            attrs["start"] = start
            recurdef, until = recurrence_attrs("start")
            if draw(st.booleans()):
                attrs[recurdef] = draw(recurrences(start))
                if draw(st.booleans()):
                    attrs[until] = shift_days(start, draw(st.integers(0, 60)))
        objects.append(CatalogObject(uid=uid, path=path, attrs=attrs))
    return objects


# --- the wire format (docs/api.md) ---------------------------------------------------------


def wire_date(value: Any) -> Any:
    if isinstance(value, DateTime):
        # The DateTime's instant, as the connector sends it (ISO8601() is an hour off for a wall
        # time in its zone's summer-time gap; asdatetime() can pick a zone's LMT offset).
        return iso_datetime(value)
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    return value


def wire_value(value: Any) -> Any:
    """JSON for a Python index or query value (dates as ISO 8601, tuples as lists)."""
    if isinstance(value, DateTime | datetime.datetime | datetime.date):
        return wire_date(value)
    if isinstance(value, dict):
        return {key: wire_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [wire_value(item) for item in value]
    return value


def to_wire(obj: CatalogObject, indexes=INDEXES, metadata=METADATA) -> dict[str, Any]:
    """The batch entry that catalogs ``obj`` in the service, as the connector would send it."""
    values: dict[str, Any] = {}
    for decl in indexes:
        attr = decl.indexed_attrs[0] if decl.indexed_attrs else decl.name
        if decl.type == "DateRangeIndex":
            # ZCatalog reads a missing since/until attribute as an open end, never "not indexed".
            values[decl.name] = [
                wire_date(obj.attrs.get(decl.since_field)),
                wire_date(obj.attrs.get(decl.until_field)),
            ]
        elif decl.type in ("ExtendedPathIndex", "PathIndex"):
            values[decl.name] = obj.attrs.get(attr, obj.path)
        elif decl.type == "DateRecurringIndex":
            if attr in obj.attrs and obj.attrs[attr] is not None:
                # The connector's own conversion (named zones travel by name).
                recurdef, until = recurrence_attrs(decl.name)
                rule = obj.attrs.get(recurdef)
                values[decl.name] = recurrence_value(obj.attrs[attr], rule, obj.attrs.get(until) if rule else None)
        elif attr in obj.attrs:
            values[decl.name] = wire_value(obj.attrs[attr])
    return {
        "op": "index",
        "uid": obj.uid,
        "path": obj.path,
        "values": values,
        "metadata": {name: wire_value(obj.attrs[name]) for name in metadata if name in obj.attrs},
    }


def _index_stand_in(decl: IndexDeclaration):
    """What the connector's query conversion reads of an index object."""
    return types.SimpleNamespace(meta_type=decl.type, index_naive_time_as_local=decl.index_naive_time_as_local)


def query_to_wire(query: dict[str, Any], indexes=INDEXES) -> dict[str, Any]:
    """The JSON query the connector sends: index values read as each index reads them."""
    by_name = {decl.name: decl for decl in indexes}
    return {key: wire_value(query_value(_index_stand_in(by_name[key]), value) if key in by_name else value)
            for key, value in query.items()}


# --- queries -------------------------------------------------------------------------------


def _values_of(objects: list[CatalogObject], attr: str) -> list[Any]:
    found = []
    for obj in objects:
        value = obj.attrs.get(attr)
        if isinstance(value, list):
            found.extend(value)
        elif value is not None:
            found.append(value)
    return found


def _biased(known: list[Any], fresh: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly values the objects have (so queries hit), sometimes fresh ones."""
    if not known:
        return fresh
    pool = st.sampled_from(sorted(set(known), key=repr))
    return st.one_of(pool, pool, pool, fresh)


def _pick(draw, known: list[Any], fresh: st.SearchStrategy) -> Any:
    if known and draw(st.integers(0, 3)):
        return draw(st.sampled_from(known))
    return draw(fresh)


def _field_like(draw, value: st.SearchStrategy, *, keyword=False, ranges=True) -> Any:
    """Every shape a Field/Keyword/UUID/Date/Gopip query takes."""
    shape = draw(
        st.sampled_from(
            ["plain", "plain", "list", "query", "not", "not_only", "range", "none", "empty"]
            + (["operator"] if keyword else [])
        )
    )
    if shape == "plain":
        return draw(value)
    if shape == "list":
        return draw(st.lists(value, min_size=0, max_size=3))
    if shape == "query":
        return {"query": draw(st.one_of(value, st.lists(value, max_size=3)))}
    if shape == "not":
        return {"query": draw(st.lists(value, min_size=1, max_size=3)), "not": draw(value)}
    if shape == "not_only":
        return {"not": draw(st.one_of(value, st.lists(value, min_size=1, max_size=2)))}
    if shape == "operator":
        return {
            "query": draw(st.lists(value, min_size=1, max_size=3)),
            "operator": draw(st.sampled_from(["and", "or"])),
        }
    if shape == "range" and ranges:
        kind = draw(st.sampled_from(["min", "max", "min:max"]))
        if kind == "min:max":
            # Bounds in either order: UnIndex takes min(keys) and max(keys) as the bounds, so an
            # inverted pair selects the same range as the ordered one.
            return {"query": [draw(value), draw(value)], "range": kind}
        return {"query": draw(value), "range": kind}
    if shape == "none":
        return None
    return draw(st.sampled_from(["", [], {"query": []}]))


TEXT_FRESH = st.sampled_from(WORDS + ["nothing", "caf*", "new*", "Fö*", "日本"])


@st.composite
def text_queries(draw, objects: list[CatalogObject], attr: str) -> str:
    words = [word for text in _values_of(objects, attr) for word in str(text).split()]
    shape = draw(st.sampled_from(["word", "and", "or", "not", "phrase", "glob", "implicit_and"]))
    first, second = _pick(draw, words, TEXT_FRESH), _pick(draw, words, TEXT_FRESH)
    if shape == "word":
        return first
    if shape == "and":
        return f"{first} AND {second}"
    if shape == "or":
        return f"{first} OR {second}"
    if shape == "not":
        return f"{first} AND NOT {second}"
    if shape == "phrase":
        return f'"{first} {second}"'
    if shape == "glob":
        stem = first[: max(1, len(first) - 2)].rstrip("*")
        return f"{stem}*"
    return f"{first} {second}"


@st.composite
def path_queries(draw, objects: list[CatalogObject]) -> Any:
    known = [ROOT] + [obj.path for obj in objects]
    known += [path.rsplit("/", 1)[0] + "/nope" for path in known[:2]]
    path = st.sampled_from(known)
    shape = draw(st.sampled_from(["plain", "list", "depth", "navtree", "navtree_start", "operator"]))
    if shape == "plain":
        return draw(path)
    if shape == "list":
        return draw(st.lists(path, min_size=1, max_size=3))
    query: dict[str, Any] = {"query": draw(st.one_of(path, st.lists(path, min_size=1, max_size=2)))}
    if shape == "depth":
        query["depth"] = draw(st.sampled_from([0, 1, 2, -1]))
    elif shape == "navtree":
        query["navtree"] = True
        query["depth"] = draw(st.sampled_from([0, 1, 2]))
    elif shape == "navtree_start":
        query["navtree"] = True
        query["navtree_start"] = draw(st.integers(0, 3))
        if draw(st.booleans()):
            query["depth"] = draw(st.sampled_from([1, 2]))
    else:
        query["operator"] = draw(st.sampled_from(["and", "or"]))
    return query


def _as_datetime_kind(value):
    if isinstance(value, DateTime):
        from plone.event.utils import pydt

        return pydt(value)
    return value


def _occurrences(objects: list[CatalogObject], name: str) -> list[datetime.datetime]:
    """Every occurrence of the recurring events (plone.event's expansion, sorted)."""
    from plone.event.recurrence import recurrence_sequence_ical
    from plone.event.utils import pydt

    recurdef, until = recurrence_attrs(name)
    found = []
    for obj in objects:
        start = obj.attrs.get(name)
        if start is None:
            continue
        rule = obj.attrs.get(recurdef)
        if rule:
            found += recurrence_sequence_ical(start, recrule=rule, until=obj.attrs.get(until))
        else:
            found.append(pydt(start))
    return sorted(found)


@st.composite
def criterion(draw, objects: list[CatalogObject], name: str) -> Any:
    """One index's part of a query."""
    decl = INDEX_BY_NAME[name]
    kind = decl.type
    if kind == "FieldIndex" and name in ("portal_type", "review_state", "sortable_title", "getId"):
        pool = {
            "portal_type": PORTAL_TYPES,
            "review_state": STATES,
            "sortable_title": TITLES,
            "getId": ["a", "a b", "%", "_"],
        }[name]
        return _field_like(draw, _biased(_values_of(objects, name), st.sampled_from(pool)))
    if kind == "KeywordIndex":
        value = _biased(_values_of(objects, name), st.sampled_from(SUBJECTS))
        return _field_like(draw, value, keyword=True)
    if kind == "BooleanIndex":
        return draw(st.sampled_from([True, False, [True], [False], {"query": True}, {"query": False}]))
    if kind == "UUIDIndex":
        uids = [obj.uid for obj in objects]
        return _field_like(draw, _biased(uids, st.just("f" * 32)))
    if kind == "DateIndex":
        return _field_like(draw, _biased(_values_of(objects, name), datetimes()))
    if kind == "DateRangeIndex":
        known = _values_of(objects, "effective") + _values_of(objects, "expires")
        return draw(_biased(known, datetimes()))
    if kind == "ExtendedPathIndex":
        return draw(path_queries(objects))
    if kind == "ZCTextIndex":
        return draw(text_queries(objects, name))
    if kind == "DateRecurringIndex":
        # Occurrences are whole days of wall-clock time apart from the start: shift known starts,
        # or take the occurrences themselves (an hour off: where the service would place them in
        # a fixed offset), as pytz datetimes or as DateTimes.
        starts = [shift_days(start, draw(st.integers(0, 9))) for start in _values_of(objects, name)]
        occurring = _occurrences(objects, name)
        if occurring:
            jitter = st.sampled_from([0, 0, 0, -1, 1]).map(lambda hours: datetime.timedelta(hours=hours))
            moments = st.tuples(st.sampled_from(occurring), jitter).map(lambda pair: pair[0] + pair[1])
            starts += draw(st.lists(moments, min_size=1, max_size=6))
        # One kind of value per query: ZCatalog sorts a list of query values and cannot compare
        # a DateTime with a datetime (Plone never mixes them).
        if draw(st.booleans()):
            value = _biased(starts, datetimes(zones=["UTC", "GMT+2"])).map(_as_datetime_kind)
        else:
            value = _biased(starts, datetimes(zones=["UTC", "GMT+2"])).map(
                lambda v: v if isinstance(v, DateTime) else DateTime(v))
        kind_of = draw(st.sampled_from(["plain", "plain", "list", "min", "max", "min:max"]))
        if kind_of == "list":
            return draw(st.lists(value, min_size=1, max_size=3))
        if kind_of == "plain":
            return draw(value)
        if kind_of == "min:max":
            return {"query": [draw(value), draw(value)], "range": "min:max"}
        return {"query": draw(value), "range": kind_of}
    if kind == "GopipIndex":
        return _field_like(draw, st.integers(-1, 4))
    raise AssertionError(f"no query strategy for {kind}")


@st.composite
def queries(draw, objects: list[CatalogObject]) -> dict[str, Any]:
    """A ZCatalog query dict as Plone, plone.restapi or plone.app.querystring send it."""
    names = (
        draw(
            st.lists(st.sampled_from([decl.name for decl in INDEXES]), min_size=1, max_size=3, unique=True),
            label="indexes",
        )
        if draw(st.integers(0, 2)) == 0
        else [draw(st.sampled_from([decl.name for decl in INDEXES]))]
    )
    query: dict[str, Any] = {name: draw(criterion(objects, name)) for name in names}
    if draw(st.booleans()):
        sort_on = draw(st.lists(st.sampled_from(SORTABLE), min_size=1, max_size=3, unique=True))
        query["sort_on"] = sort_on[0] if len(sort_on) == 1 and draw(st.booleans()) else sort_on
        order = st.sampled_from(["ascending", "descending", "reverse", ""])
        if isinstance(query["sort_on"], list) and draw(st.booleans()):
            query["sort_order"] = [draw(order) for _ in query["sort_on"]]
        elif draw(st.booleans()):
            query["sort_order"] = draw(order)
        if draw(st.integers(0, 3)) == 0:
            query["sort_limit"] = draw(st.integers(1, 8))
    if draw(st.integers(0, 2)) == 0:
        query["b_start"] = draw(st.integers(0, 14))
        query["b_size"] = draw(st.integers(1, 6))
    return query


@st.composite
def recurrence_cases(draw, max_objects=8, max_queries=6) -> tuple[list[CatalogObject], list[dict[str, Any]]]:
    """Content with recurring events, and queries on their occurrences (sometimes with another
    index, sometimes sorted by start)."""
    objects = draw(plone_objects(max_size=max_objects))
    recurdef, until = recurrence_attrs("start")
    for obj in objects:
        # Mostly recurring events here (plone_objects gives a quarter of its objects a rule).
        if draw(st.integers(0, 3)):
            start = obj.attrs["start"] = draw(recurrence_starts())
            obj.attrs[recurdef] = draw(recurrences(start))
            obj.attrs.pop(until, None)
            if draw(st.booleans()):
                obj.attrs[until] = shift_days(start, draw(st.integers(0, 60)))
    found = []
    for _ in range(draw(st.integers(1, max_queries))):
        query = {"start": draw(criterion(objects, "start"))}
        if draw(st.integers(0, 3)) == 0:
            other = draw(st.sampled_from(["portal_type", "review_state", "effective", "path"]))
            query[other] = draw(criterion(objects, other))
        if draw(st.integers(0, 3)) == 0:
            query["sort_on"] = draw(st.sampled_from(["start", "modified"]))
        found.append(query)
    return objects, found


@st.composite
def cases(draw, max_objects=12, max_queries=6) -> tuple[list[CatalogObject], list[dict[str, Any]]]:
    objects = draw(plone_objects(max_size=max_objects))
    found = draw(st.lists(queries(objects), min_size=1, max_size=max_queries))
    return objects, found


# --- fixed cases (tests/service/regressions/*.json) ----------------------------------------


def _encode(value: Any) -> Any:
    if isinstance(value, DateTime):
        # str() keeps the zone name, so the case replays with the same DateTime.
        return {"$DateTime": str(value)}
    if isinstance(value, datetime.datetime):
        # With its offset and, for a pytz zone, the zone's name (plone.app.event's starts).
        return {"$datetime": value.isoformat(), "zone": getattr(value.tzinfo, "zone", None)}
    if isinstance(value, tuple):
        return {"$tuple": [_encode(item) for item in value]}
    if isinstance(value, list):
        return [_encode(item) for item in value]
    if isinstance(value, dict):
        return {key: _encode(item) for key, item in value.items()}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$DateTime"}:
            return DateTime(value["$DateTime"])
        if set(value) == {"$datetime", "zone"}:
            return _decode_datetime(value["$datetime"], value["zone"])
        if set(value) == {"$tuple"}:
            return tuple(_decode(item) for item in value["$tuple"])
        return {key: _decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode(item) for item in value]
    return value


def _decode_datetime(text: str, zone: str | None) -> datetime.datetime:
    parsed = datetime.datetime.fromisoformat(text)
    offset = parsed.utcoffset()
    wall = parsed.replace(tzinfo=None)
    if zone is not None:
        # The pytz tzinfo with the offset the value had, even one its zone no longer has then.
        tz = pytz.timezone(zone)
        for info in getattr(tz, "_tzinfos", {}).values():
            if info._utcoffset == offset:
                return wall.replace(tzinfo=info)
        return tz.localize(wall)
    if offset is None:
        return wall
    return pytz.FixedOffset(int(offset.total_seconds()) // 60).localize(wall)


def case_to_json(objects: list[CatalogObject], query: dict[str, Any], note: str = "") -> dict:
    """A replayable case: the objects with their Python values, and one query."""
    return {
        "note": note,
        "objects": [{"uid": obj.uid, "path": obj.path, "attrs": _encode(obj.attrs)} for obj in objects],
        "query": _encode(query),
    }


def case_from_json(data: dict) -> tuple[list[CatalogObject], dict[str, Any]]:
    objects = [
        CatalogObject(uid=item["uid"], path=item["path"], attrs=_decode(item["attrs"]))
        for item in data["objects"]
    ]
    return objects, _decode(data["query"])
