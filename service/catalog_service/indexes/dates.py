"""Date values as ZCatalog's date indexes see them.

Wire values are ISO 8601 strings (an offset, or naive; naive times are read as UTC, see
docs/decisions/0002-values.md), or numbers of seconds since the epoch. Each index type turns them
into the integers its ZCatalog counterpart stores, with the same formula and the same truncation,
so ranges, ties and sort order come out the same.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from ..errors import QueryError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX32 = 2**31 - 1


class BadDate(QueryError):
    title = "Invalid date"


def parse_datetime(value) -> datetime:
    """An aware UTC datetime from a wire value, or BadDate."""
    if isinstance(value, bool):
        raise BadDate(f"not a date: {value!r}")
    if isinstance(value, datetime):  # the server's own clock (a query's effective date), not the wire
        return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).astimezone(UTC)
    if isinstance(value, int | float):
        try:
            return EPOCH + timedelta(seconds=value)
        except (OverflowError, ValueError) as exc:
            raise BadDate(f"date out of range: {value!r}") from exc
    if isinstance(value, str) and value.strip():
        text = value.strip()
        if text.endswith("Z") or text.endswith("z"):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            try:
                parsed = datetime.combine(date.fromisoformat(text), time())
            except ValueError as exc:
                raise BadDate(f"not an ISO 8601 date: {value!r}") from exc
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC)
    raise BadDate(f"not a date: {value!r}")


def date_index_minutes(value) -> int:
    """DateIndex._convert: a calendar-shaped minute count (not a true minute count: every month
    has 31 days), in UTC. Raises BadDate beyond the 32-bit range like ZCatalog's OverflowError."""
    dt = parse_datetime(value)
    minutes = (((dt.year * 12 + dt.month) * 31 + dt.day) * 24 + dt.hour) * 60 + dt.minute
    if minutes > MAX32:
        raise BadDate(f"{value!r} is not within the range of indexable dates")
    return minutes


def epoch_minutes(value, precision: int = 1) -> int:
    """PluginIndexes.util.datetime_to_minutes: milliseconds since the epoch (floored) / 60000,
    as a float truncated toward zero, flattened to ``precision``."""
    dt = parse_datetime(value)
    delta = dt - EPOCH
    micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    minutes = (micros // 1000) / 1000 / 60
    if precision > 1:
        minutes = minutes - (minutes % precision)
    result = int(minutes)
    if not -MAX32 <= result <= MAX32:
        raise BadDate(f"{value!r} is not within the range of dates allowed")
    return result


def iso_utc(value) -> str:
    """A sortable text form for FieldIndexes declared with value_type 'datetime'."""
    return parse_datetime(value).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")
