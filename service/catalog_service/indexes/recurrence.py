"""Bounded expansion of recurring dates, as plone.event does it for DateRecurringIndex.

The rules follow ``plone.event.recurrence.recurrence_sequence_ical``: seconds precision; the rule
is evaluated on naive local times of the event's zone and each occurrence is then placed in that
zone (so DST shifts keep the wall-clock time); DTSTART is removed from the rule and the start is
always an occurrence; RDATE/EXDATE times are set to the start's time; UNTIL covers its whole day;
at most MAXCOUNT occurrences; none after ``until``.
"""

from __future__ import annotations

import multiprocessing
import re
import threading
from datetime import UTC, datetime, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil import rrule

from .dates import MAX32, BadDate, parse_datetime

MAXCOUNT = 1000


class RecurrenceError(ValueError):
    pass


def _zone(start_text: str, tz_name: str | None):
    if tz_name:
        try:
            return ZoneInfo(tz_name)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise RecurrenceError(f"unknown time zone {tz_name!r}") from exc
    parsed = datetime.fromisoformat(start_text.replace("Z", "+00:00")) if isinstance(start_text, str) else None
    if parsed is not None and parsed.tzinfo is not None:
        return timezone(parsed.utcoffset())
    return UTC


def minutes(dt: datetime) -> int:
    """plone.event.utils.dt2int: calendar-shaped minutes in UTC."""
    dt = dt.astimezone(UTC)
    value = (((dt.year * 12 + dt.month) * 31 + dt.day) * 24 + dt.hour) * 60 + dt.minute
    if value > MAX32:
        raise BadDate(f"{dt} is not within the range of indexable dates")
    return value


# dateutil walks every period of a rule until it yields, so a rule that can never match (30
# February) at a fine frequency walks every minute to the year 9999: minutes of CPU for one
# entry, and a real rule's cost cannot be told from its text. Rules are therefore expanded in a
# child process with a time limit; past it the rule is refused (RecurrenceError, a 422 for the
# batch) instead of blocking the service. Plone itself takes as long to expand such a rule. The
# child is started once per process and kept; a real event's rule takes milliseconds.
EXPANSION_SECONDS = 1.0


def _collect(rset, zone, until_dt, maxcount: int) -> list[int]:
    found: set[int] = set()
    try:
        for count, occurrence in enumerate(rset):
            if count + 1 > maxcount:
                break
            local = occurrence.replace(tzinfo=zone)
            if until_dt is not None and local.astimezone(UTC) > until_dt:
                break
            found.add(minutes(local))
    except (ValueError, OverflowError) as exc:
        raise RecurrenceError(f"recurrence cannot be expanded: {exc}") from exc
    return sorted(found)


_pool = None
_pool_lock = threading.Lock()


def _in_child(args: tuple) -> list[int]:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = multiprocessing.get_context("spawn").Pool(1)
        pending = _pool.apply_async(_expand_fully, args)
        try:
            return pending.get(EXPANSION_SECONDS)
        except multiprocessing.TimeoutError:
            _pool.terminate()
            _pool = None
            raise RecurrenceError(
                f"recurrence rule cannot be expanded within {EXPANSION_SECONDS:g} s (it matches too "
                f"rarely for its frequency)") from None


def _expand_fully(start, rule, until, tz_name, maxcount) -> list[int]:
    zone, naive_start, until_dt, rset = _parse(start, rule, until, tz_name)
    return _collect(rset, zone, until_dt, maxcount)


def _parse(start, rule, until, tz_name):
    if isinstance(start, dict):
        raise RecurrenceError("start must be a date")
    zone = _zone(start, tz_name)
    start_dt = parse_datetime(start).astimezone(zone).replace(microsecond=0)
    naive_start = start_dt.replace(tzinfo=None)
    until_dt = parse_datetime(until).replace(microsecond=0) if until else None

    if rule:
        if not isinstance(rule, str) or len(rule) > 10000:
            raise RecurrenceError("recurrence must be an RFC 5545 rule text")
        t0 = f"T{naive_start.hour:02d}{naive_start.minute:02d}{naive_start.second:02d}"
        # plone.event passes re.MULTILINE as the count argument; the effect is "at most 8".
        rule = re.sub(r"DTSTART:[^;\n]*[;\n]", "", rule, count=8)
        if t0 != "T000000":
            rule = re.sub(r"T000000", t0, rule)
        rule = re.sub(r"(UNTIL[^T]*[0-9]{8})T([0-9]{6})(Z?)", r"\1T235959\3", rule)
        rule = re.sub(
            r"EXDATE:([^\n\s]+)",
            lambda m: re.sub(r"T[0-9]{6}(Z?)", rf"{t0}\1", m.group(0)),
            rule,
        )
        try:
            rset = rrule.rrulestr(rule, dtstart=naive_start, forceset=True, ignoretz=True)
        except (ValueError, TypeError, OverflowError) as exc:
            raise RecurrenceError(f"invalid recurrence rule: {exc}") from exc
    else:
        rset = rrule.rruleset()
    rset.rdate(naive_start)
    return zone, naive_start, until_dt, rset


def occurrences(start, rule: str | None, until=None, tz_name: str | None = None,
                maxcount: int = MAXCOUNT) -> list[int]:
    """Sorted distinct occurrence minutes of an event starting at ``start``."""
    zone, naive_start, until_dt, rset = _parse(start, rule, until, tz_name)  # errors come from here
    if not rule:
        return _collect(rset, zone, until_dt, maxcount)
    return _in_child((start, rule, until, tz_name, maxcount))


__all__ = ["MAXCOUNT", "RecurrenceError", "minutes", "occurrences"]
