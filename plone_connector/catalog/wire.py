"""Python values to and from the JSON the service stores, and ZCatalog queries as the service reads them.

Index values follow docs/api.md: JSON scalars and lists, dates as ISO 8601 strings. Metadata is
opaque to the service, so it may carry a small tagging scheme (``{"@t": tag, "v": ...}``) for
values JSON cannot hold, which lets brains return real ``DateTime`` objects, tuples and
``Missing.Value`` exactly as a ZCatalog metadata record would. A query goes out through
``wire_query``: each index's part read as that index reads it (``query_value``), then made JSON
(``wire_query_value``), with ZCatalog's batch arguments. An entry's key is ``catalog_uid``.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import hashlib
import logging
import math
from collections.abc import Callable

import Missing
from DateTime import DateTime
from DateTime.interfaces import DateTimeError

logger = logging.getLogger("plone_connector.catalog")

TAG = "@t"
MAX_UID_LENGTH = 200
# Query keys ZCatalog reads besides index names; anything else it ignores, and so do we.
SORT_KEYS = ("sort_on", "sort_order")


def catalog_uid(path: str) -> str:
    """The service's key for a catalog entry: its path, as ZCatalog's uid is (digested if long)."""
    if len(path) <= MAX_UID_LENGTH:
        return path
    return "sha256:" + hashlib.sha256(path.encode("utf-8")).hexdigest()


# -- index values ---------------------------------------------------------------------------


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def iso_datetime(value: DateTime) -> str:
    """A DateTime's instant (its micros(): what DateIndex reads through toZone('UTC'), and the
    other date indexes too) as ISO 8601 with the DateTime's offset, to the microsecond.

    Not ISO8601(): for a wall time in its zone's summer-time gap (DateTime(2024, 3, 31, 2, 30, 0,
    'Europe/Berlin'), which a form can send) that prints the wall time with the standard offset,
    an hour away from the instant the DateTime holds and ZCatalog indexes. It also leaves the
    offset out of a DateTime made without a zone (DateTime("2026/01/02 03:04")), though that holds
    one instant in the process's local zone."""
    instant = _EPOCH + dt.timedelta(microseconds=value.micros())
    offset = dt.timedelta(seconds=int(value.tzoffset()))
    if offset % dt.timedelta(minutes=1):  # a zone's local mean time (+00:53:28): the instant in UTC
        offset = dt.timedelta(0)
    return instant.astimezone(dt.timezone(offset)).isoformat()


def index_date(value) -> str | None:
    """A date-like value as DateIndex reads it (DateIndex._convert), or None if it is no date.

    A naive datetime stays naive (the service reads it as UTC): extraction.date first gives it
    the zone its DateIndex reads it in."""
    if isinstance(value, DateTime):
        return iso_datetime(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return dt.datetime.fromtimestamp(value, dt.UTC).isoformat()
    if isinstance(value, str) and value:
        return iso_datetime(DateTime(value))
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dt.date):
        # DateIndex uses date.timetuple() as UTC parts.
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC).isoformat()
    return None


class IsoDate(str):
    """An ISO 8601 string that was a date object: it tells how to type a new index (schema.py)."""

    __slots__ = ()


def index_scalar(value):
    """A Field/Keyword/UUID index value as JSON."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return str(value)
    if isinstance(value, DateTime):
        return IsoDate(iso_datetime(value))
    if isinstance(value, dt.datetime):
        return IsoDate(value.isoformat())
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [index_scalar(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return float(value)
    logger.warning("indexing a %s as its text form", type(value).__name__)
    return str(value)


# -- dates as an index reads them (for its values and its queries) -------------------------


def naive_as_date_index_reads_it(index, value):
    """DateIndex._convert reads a naive datetime in the Plone process's local time when
    ``index_naive_time_as_local`` is set (the default), else as UTC; the service cannot know the
    process's zone, so the value goes out as that UTC instant. ZCatalog's own ``Local`` zone is
    used, with its quirks: its standard and summer offsets are the ones of the zone the process
    had when DateIndex was imported, and which of them applies is asked of ``time.localtime``."""
    if not isinstance(value, dt.datetime) or value.tzinfo is not None:
        return value
    if getattr(index, "index_naive_time_as_local", True):
        from Products.PluginIndexes.DateIndex.DateIndex import Local

        return value.replace(tzinfo=Local).astimezone(dt.UTC)
    return value.replace(tzinfo=dt.UTC)


def as_range_reads_it(value):
    # datetime_to_minutes makes a DateTime of a datetime, which reads a naive one in the
    # process's local zone.
    return DateTime(value) if isinstance(value, dt.datetime) else value


# -- queries --------------------------------------------------------------------------------


def wire_query(query: dict, index_named: Callable, unrestricted: bool = False) -> tuple[dict, int, int | None, int | None]:
    """ZCatalog's query as the service reads it, and ZCatalog's batch: b_start, b_size and,
    for a sorted query paged by sort_limit alone, where its first half ends (sort_limit_stop).

    ``index_named(name)``: the catalog's index object of that name (not a proxy), or None; keys
    that are neither an index nor a sort key are left out, as ZCatalog ignores them.
    A restricted search's principals go in a header (Plone's searchResults replaces any
    allowedRolesAndUsers of the query with them); an unrestricted one is filtered by the
    query's own, as ZCatalog filters it.
    """
    service_query = {}
    for key, value in query.items():
        if key in SORT_KEYS:
            service_query[key] = wire_query_value(value)
        elif unrestricted or key != "allowedRolesAndUsers":
            index = index_named(key)
            if index is not None:
                service_query[key] = wire_query_value(query_value(index, value))
    # Catalog._sort_limit_arguments: b_size, else sort_limit, bounds the sequence; without
    # either, b_start is read but nothing is sliced.
    b_start = int(query.get("b_start", 0) or 0)
    b_size = query.get("b_size")
    sort_limit = query.get("sort-limit")
    if sort_limit is None:
        sort_limit = query.get("sort_limit")
    stop = None
    if b_size is not None:
        b_size = int(b_size)
    elif sort_limit:
        b_size = int(sort_limit)
        # Catalog.sortResults keeps the first sort_limit results, then slices from b_start
        # (in the first half of the result; past it, it sorts in reverse and does not cut).
        if service_query.get("sort_on"):
            stop = b_size
    else:
        b_start = 0
    return service_query, b_start, b_size, stop


def wire_query_value(value):
    """A query value as JSON: DateTimes and other dates as ISO 8601, records as objects."""
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    if isinstance(value, DateTime):
        return iso_datetime(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return [wire_query_value(v) for v in value]
    if isinstance(value, dict) or hasattr(value, "keys"):
        keys = list(value.keys())  # ZPublisher records have keys() but no iteration
        return {str(k): wire_query_value(value[k]) for k in keys}
    date = index_date(value)
    if date is not None:
        return date
    return str(value)


def _recurring_query_date(index, value):
    # DateRecurringIndex._convert: dt2int reads a datetime through pydt (naive as UTC; a pytz
    # time keeps its wall-clock time and takes the offset its zone has then).
    from plone.event.utils import pydt

    return pydt(value, exact=False)


QUERY_DATES = {
    "DateRecurringIndex": _recurring_query_date,
    # UnIndex.query_index reads query values (and ``not``) through DateIndex._convert.
    "DateIndex": naive_as_date_index_reads_it,
    "DateRangeIndex": lambda index, value: as_range_reads_it(value),
}


# Index types that read a query's text through DateTime (DateIndex._convert, DateRangeIndex's
# datetime_to_minutes).
QUERY_TEXT_AS_DATETIME = ("DateIndex", "DateRangeIndex")


def query_value(index, value):
    """A query value with its Python datetimes (and, for a DateIndex or DateRangeIndex, its text)
    read as ``index`` reads them (its ``_convert``), so that what goes on the wire is an instant
    the service reads the same way."""
    meta_type = getattr(index, "meta_type", None)
    convert = QUERY_DATES.get(meta_type)
    if convert is None:
        return value
    value = _convert_dates(value, lambda date: convert(index, date))
    if meta_type in QUERY_TEXT_AS_DATETIME:
        value = _query_terms(value, _text_as_datetime)
    return value


def _text_as_datetime(value):
    # DateTime reads the forms ZCatalog takes, a zone-less one other than ISO 8601 ("2024/07/15
    # 10:00") in the process's local zone; the service reads ISO 8601 only, zone-less as UTC.
    if not isinstance(value, str) or not value.strip():
        return value
    try:
        return DateTime(value)
    except DateTimeError:
        return value  # no date: refused by ZCatalog, and by the service (400)


def _query_terms(value, convert):
    """``convert`` applied to a query's values: the value, a list's items, a mapping's ``query``
    and ``not`` (not its options, such as ``range``)."""
    if isinstance(value, (list, tuple, set, frozenset)):
        return [convert(v) for v in value]
    if isinstance(value, dict) or (hasattr(value, "keys") and not isinstance(value, (str, bytes))):
        return {k: _query_terms(value[k], convert) if k in ("query", "not") else value[k] for k in list(value.keys())}
    return convert(value)


def _convert_dates(value, convert):
    if isinstance(value, dt.date):
        return convert(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_convert_dates(v, convert) for v in value]
    if isinstance(value, dict) or (hasattr(value, "keys") and not isinstance(value, (str, bytes))):
        return {k: _convert_dates(value[k], convert) for k in list(value.keys())}
    return value


# -- metadata -------------------------------------------------------------------------------


def encode_metadata(value):
    """A metadata value as JSON, lossless for the types Plone's metadata columns hold."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if value is Missing.Value:
        return {TAG: "missing"}
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {TAG: "float", "v": repr(value)}
    if isinstance(value, DateTime):
        micros, tz_naive, tz = value.__getstate__()
        return {TAG: "DateTime", "v": [micros, tz_naive, tz]}
    if isinstance(value, dt.datetime):
        return {TAG: "datetime", "v": value.isoformat()}
    if isinstance(value, dt.date):
        return {TAG: "date", "v": value.isoformat()}
    if isinstance(value, list):
        return [encode_metadata(v) for v in value]
    if isinstance(value, tuple):
        return {TAG: "tuple", "v": [encode_metadata(v) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {TAG: "frozenset" if isinstance(value, frozenset) else "set",
                "v": [encode_metadata(v) for v in sorted(value, key=repr)]}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and TAG not in value:
            return {k: encode_metadata(v) for k, v in value.items()}
        return {TAG: "dict", "v": [[encode_metadata(k), encode_metadata(v)] for k, v in value.items()]}
    if isinstance(value, bytes):
        return {TAG: "bytes", "v": base64.b64encode(value).decode("ascii")}
    if isinstance(value, decimal.Decimal):
        return {TAG: "decimal", "v": str(value)}
    # Objects of other classes are kept as their text: a brain must never unpickle data coming
    # back from the network.
    logger.warning("metadata value of type %s stored as its text form", type(value).__name__)
    return str(value)


def _datetime_from_state(state) -> DateTime:
    value = DateTime.__new__(DateTime)
    value.__setstate__(tuple(state))
    return value


_DECODERS = {
    "missing": lambda v: Missing.Value,
    "float": float,
    "DateTime": _datetime_from_state,
    "datetime": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
    "tuple": lambda v: tuple(decode_metadata(i) for i in v),
    "set": lambda v: {decode_metadata(i) for i in v},
    "frozenset": lambda v: frozenset(decode_metadata(i) for i in v),
    "dict": lambda v: {decode_metadata(k): decode_metadata(i) for k, i in v},
    "bytes": base64.b64decode,
    "decimal": decimal.Decimal,
}


def decode_metadata(value):
    if isinstance(value, list):
        return [decode_metadata(v) for v in value]
    if isinstance(value, dict):
        tag = value.get(TAG)
        if tag is not None:
            decoder = _DECODERS.get(tag)
            if decoder is None:
                return value
            return decoder(value.get("v"))
        return {k: decode_metadata(v) for k, v in value.items()}
    return value
