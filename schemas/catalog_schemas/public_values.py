"""Metadata values as the public routes show them: plain JSON, never the connector's tags.

The connector stores metadata in a small tagged encoding (``{"@t": tag, "v": ...}``, see
plone_connector/catalog/wire.py) so that its brains get ``DateTime`` objects, tuples and
``Missing.Value`` back. Frontends get what plone.restapi's ``json_compatible`` makes of those
values: dates as ISO 8601 in UTC with their offset and whole seconds, tuples and sets as lists,
``Missing.Value`` as null, decimals as text, bytes as UTF-8 text. This module reads the encoding
without importing the connector (the service must not import Zope), and writes the two tags the
demo catalog needs, so that it stores what a real site stores.
"""

from __future__ import annotations

import base64
import binascii
import math
from datetime import UTC, date, datetime, timedelta

TAG = "@t"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _utc_seconds(moment: datetime) -> str:
    """plone.restapi's form of an aware moment: UTC, microseconds dropped."""
    return moment.astimezone(UTC).replace(microsecond=0).isoformat()


def _zope_datetime(state) -> str | None:
    # DateTime's state is (micros since the epoch, timezone-naive flag, zone name); the micros
    # are the instant whatever the flag, so the instant in UTC is exact. (plone.restapi shows a
    # naive DateTime as its wall-clock time without an offset; an offset is always given here.)
    try:
        micros = int(state[0])
        return _utc_seconds(EPOCH + timedelta(microseconds=micros))
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _python_datetime(text) -> str | None:
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:  # a naive datetime names no instant: shown as it is
        return moment.replace(microsecond=0).isoformat()
    return _utc_seconds(moment)


def _bytes(text) -> str | None:
    try:
        return base64.b64decode(text, validate=True).decode("utf-8", "replace")
    except (TypeError, ValueError, binascii.Error):
        return None


def _float(text) -> float | None:
    # Only non-finite floats are tagged; JSON has no NaN or infinity.
    try:
        number = float(text)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _key(value) -> str:
    shown = public_value(value)
    if isinstance(shown, str):
        return shown
    if isinstance(shown, bool) or shown is None:
        return {True: "true", False: "false", None: "null"}[shown]
    return str(shown)


def _pairs(pairs) -> dict:
    if not isinstance(pairs, list):
        return {}
    return {_key(pair[0]): public_value(pair[1]) for pair in pairs if isinstance(pair, list) and len(pair) == 2}


def _items(values) -> list:
    return [public_value(v) for v in values] if isinstance(values, list) else []


_TAGS = {
    "missing": lambda v: None,
    "float": _float,
    "DateTime": _zope_datetime,
    "datetime": _python_datetime,
    "date": lambda v: v if isinstance(v, str) else None,
    "tuple": _items,
    "set": _items,
    "frozenset": _items,
    "dict": _pairs,
    "bytes": _bytes,
    "decimal": lambda v: v if isinstance(v, str) else None,
}


def public_value(value):
    """The plain JSON form of a stored metadata value. A tag this module does not know (written by
    a newer connector) is shown as null rather than as its encoding."""
    if isinstance(value, dict):
        if TAG in value:
            convert = _TAGS.get(value[TAG])
            return None if convert is None else convert(value.get("v"))
        return {k: public_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [public_value(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def public_metadata(metadata: dict) -> dict:
    """Every column of a stored metadata record in its plain JSON form."""
    return {name: public_value(value) for name, value in metadata.items()}


# -- writing the encoding (the demo catalog) --------------------------------------------------


def wire_datetime(moment: datetime, zone: str = "UTC") -> dict:
    """An aware datetime as the connector stores a Zope ``DateTime`` made in ``zone``."""
    if moment.tzinfo is None:
        raise ValueError("a DateTime's instant needs an aware datetime")
    delta = moment - EPOCH
    micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    return {TAG: "DateTime", "v": [micros, False, zone]}


def wire_tuple(values) -> dict:
    return {TAG: "tuple", "v": list(values)}


MISSING = {TAG: "missing"}


def wire_date(day: date) -> dict:
    return {TAG: "date", "v": day.isoformat()}
