"""Index values of one object, extracted exactly as each ZCatalog index type reads them.

Each function mirrors the ``index_object`` of its index class (read the class to see why a case is
what it is); it returns ``NOT_INDEXED`` where that index would hold no entry for the object, which
the wire format expresses as an absent key. How a query's values are read (for the same index
types) is in wire.py, with the rest of a query's way to the service.
"""

from __future__ import annotations

import datetime as dt

import Missing
from Acquisition import aq_base
from Products.PluginIndexes.util import datetime_to_minutes, safe_callable

from .wire import as_range_reads_it, index_date, index_scalar, naive_as_date_index_reads_it

NOT_INDEXED = object()


def _datum(obj, attr):
    # UnIndex._get_object_datum
    try:
        datum = getattr(obj, attr)
        if safe_callable(datum):
            datum = datum()
    except (AttributeError, TypeError):
        return NOT_INDEXED
    return datum


def _source_names(index) -> list[str]:
    return list(index.getIndexSourceNames())


def field(index, obj):
    # UnIndex.index_object: each source attribute replaces what the previous one set.
    result = NOT_INDEXED
    for attr in _source_names(index):
        datum = _datum(obj, attr)
        result = NOT_INDEXED if datum is None or datum is NOT_INDEXED else index_scalar(datum)
    return result


def uuid(index, obj):
    # UUIDIndex never acquires the value from a parent.
    result = NOT_INDEXED
    for attr in _source_names(index):
        datum = NOT_INDEXED if getattr(aq_base(obj), attr, NOT_INDEXED) is NOT_INDEXED else _datum(obj, attr)
        result = NOT_INDEXED if datum is None or datum is NOT_INDEXED else index_scalar(datum)
    return result


def keyword(index, obj):
    # KeywordIndex._get_object_keywords; with several source attributes the last one wins.
    result = NOT_INDEXED
    for attr in _source_names(index):
        words = getattr(obj, attr, ())
        if safe_callable(words):
            try:
                words = words()
            except (AttributeError, TypeError):
                words = ()
        if not words:
            result = NOT_INDEXED
        elif isinstance(words, (bytes, str)):
            result = [index_scalar(words)]
        else:
            try:
                unique = set(words)
            except TypeError:
                result = [index_scalar(words)]
            else:
                result = [index_scalar(w) for w in sorted(unique, key=repr)]
    return result


def boolean(index, obj):
    result = NOT_INDEXED
    for attr in _source_names(index):
        datum = _datum(obj, attr)
        result = NOT_INDEXED if datum is NOT_INDEXED else bool(datum)
    return result


def date(index, obj):
    result = NOT_INDEXED
    for attr in _source_names(index):
        datum = _datum(obj, attr)
        if datum is None or datum is NOT_INDEXED:
            result = NOT_INDEXED
            continue
        converted = index_date(naive_as_date_index_reads_it(index, datum))
        result = NOT_INDEXED if converted is None else converted
    return result


def _range_end(index, value):
    if value is None:
        return None
    minutes = datetime_to_minutes(value, index.precision_value)
    if minutes is None or minutes > index.ceiling_value or minutes < index.floor_value:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # DateRangeIndex reads plain numbers as minutes since the epoch.
        return dt.datetime.fromtimestamp(value * 60, dt.UTC).isoformat()
    return index_date(as_range_reads_it(value))


def date_range(index, obj):
    since_field = index.getSinceField()
    if since_field is None:
        return NOT_INDEXED
    since = getattr(obj, since_field, None)
    if safe_callable(since):
        since = since()
    until = getattr(obj, index.getUntilField(), None)
    if safe_callable(until):
        until = until()
    return [_range_end(index, since), _range_end(index, until)]


def path(index, obj):
    attrs = getattr(index, "indexed_attrs", None)
    name = attrs[0] if attrs else index.id
    value = getattr(obj, name, None)
    if value is not None:
        if safe_callable(value):
            value = value()
        if not isinstance(value, (str, tuple, list)):
            raise TypeError(f"path value must be string or tuple of strings: ({name!r}, {value!r})")
    else:
        try:
            value = obj.getPhysicalPath()
        except AttributeError:
            return NOT_INDEXED
    if isinstance(value, (list, tuple)):
        value = "/" + "/".join(value[1:])
    return value


def text(index, obj):
    fields = getattr(index, "_indexed_attrs", None) or [index._fieldname]
    texts = []
    for attr in fields:
        value = getattr(obj, attr, None)
        if value is None:
            continue
        if safe_callable(value):
            value = value()
        if value is not None:
            if isinstance(value, (list, tuple, set)):
                texts.extend(value)
            else:
                texts.append(value)
    texts = [t for t in texts if isinstance(t, str)]
    # ZCTextIndex feeds the parts to one word list, so joining them splits identically.
    return " ".join(texts) if texts else NOT_INDEXED


def zone_name(tzinfo) -> str | None:
    """The IANA name of a named zone (pytz, zoneinfo, dateutil), None for a fixed offset."""
    for attr in ("zone", "key"):  # pytz (None for pytz.FixedOffset), zoneinfo
        name = getattr(tzinfo, attr, None)
        if isinstance(name, str) and name:
            return name
    path = getattr(tzinfo, "_filename", None)  # dateutil's tzfile: the file it was read from
    if isinstance(path, str) and path:
        return path.rsplit("zoneinfo/", 1)[-1].lstrip("/")
    return None


def recurrence_value(start, recurrence, until) -> dict:
    """A DateRecurringIndex value as the service expands it (docs/api.md), for ``start``.

    plone.event reads the start with ``pydt`` (a DateTime in a zone pytz does not know becomes
    UTC), evaluates the rule on its wall-clock time and places each occurrence back in its zone,
    so that a weekly 10:00 stays at 10:00 after a change to summer time. A named zone therefore
    travels by name, with the start as that wall-clock time.
    """
    from plone.event.utils import pydt, utc  # Products.DateRecurringIndex depends on plone.event

    begin = pydt(start, exact=False)
    if begin is None:  # no date pydt reads; kept as DateIndex reads it
        return {"start": index_date(start), "recurrence": recurrence or None, "until": None}
    if not recurrence:
        # The start alone is stored as dt2int reads it: through pydt once more (utc()), which
        # moves a time in the hour skipped by a change to summer time to the other offset.
        return {"start": utc(begin).isoformat(), "recurrence": None, "until": None}
    # plone.event compares each occurrence with utc(until), pydt's second reading too.
    end = utc(pydt(until, exact=False)) if until is not None else None
    value = {"start": begin.isoformat(), "recurrence": recurrence,
             "until": end.isoformat() if end is not None else None}
    name = zone_name(begin.tzinfo)
    if name is not None:
        value["start"] = begin.replace(tzinfo=None).isoformat()
        value["tz"] = name
    return value


def recurring(index, obj):
    try:
        start = getattr(obj, index.id)
        if safe_callable(start):
            start = start()
    except AttributeError:
        return NOT_INDEXED
    if start is None:
        return NOT_INDEXED
    recurrence = getattr(obj, index.attr_recurdef, None)
    if safe_callable(recurrence):
        recurrence = recurrence()
    until = None
    if recurrence:
        until = getattr(obj, index.getUntilField(), None)
        if safe_callable(until):
            until = until()
    return recurrence_value(start, recurrence, until)


def gopip(index, obj):
    datum = _datum(obj, index.id)
    return NOT_INDEXED if datum is None or datum is NOT_INDEXED else datum


EXTRACTORS = {
    "FieldIndex": field,
    "UUIDIndex": uuid,
    "KeywordIndex": keyword,
    "BooleanIndex": boolean,
    "DateIndex": date,
    "DateRangeIndex": date_range,
    "ExtendedPathIndex": path,
    "PathIndex": path,
    "ZCTextIndex": text,
    "DateRecurringIndex": recurring,
    "GopipIndex": gopip,
}


def index_value(index, obj):
    extractor = EXTRACTORS.get(index.meta_type)
    if extractor is None:
        raise TypeError(f"index {index.getId()!r} has an unsupported type {index.meta_type!r}")
    return extractor(index, obj)


def metadata_value(obj, name):
    # Catalog.recordify: a missing attribute is Missing.Value, a callable is called.
    attr = getattr(obj, name, Missing.Value)
    if attr is not Missing.Value and safe_callable(attr):
        attr = attr()
    return attr


