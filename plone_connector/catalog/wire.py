"""Python values to and from the JSON the service stores.

Index values follow docs/api.md: JSON scalars and lists, dates as ISO 8601 strings. Metadata is
opaque to the service, so it may carry a small tagging scheme (``{"@t": tag, "v": ...}``) for
values JSON cannot hold, which lets brains return real ``DateTime`` objects, tuples and
``Missing.Value`` exactly as a ZCatalog metadata record would.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import logging
import math

import Missing
from DateTime import DateTime

logger = logging.getLogger("plone_connector.catalog")

TAG = "@t"


# -- index values ---------------------------------------------------------------------------


def _iso_offset(seconds: float) -> str:
    sign = "-" if seconds < 0 else "+"
    minutes, seconds = divmod(abs(int(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{sign}{hours:02d}:{minutes:02d}" + (f":{seconds:02d}" if seconds else "")


def iso_datetime(value: DateTime) -> str:
    """A DateTime as ISO 8601 with its offset, to the microsecond."""
    micros = value.micros() % 1_000_000
    base = value.ISO8601()  # seconds precision with offset, e.g. 2026-01-02T03:04:05+01:00
    if value.timezoneNaive():
        # ISO8601() leaves the offset out of a DateTime made without a zone (DateTime("2026/01/02
        # 03:04"), DateTime(a naive datetime)), though it holds one instant in the process's
        # local zone; without it the service would read the time as UTC.
        base += _iso_offset(value.tzoffset())
    if micros:
        return f"{base[:19]}.{micros:06d}{base[19:]}"
    return base


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
