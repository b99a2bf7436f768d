"""Bounded expansion of recurring dates, as plone.event does it for DateRecurringIndex.

The rules follow ``plone.event.recurrence.recurrence_sequence_ical``: seconds precision; the rule
is evaluated on naive local times of the event's zone and each occurrence is then placed in that
zone (so DST shifts keep the wall-clock time); DTSTART is removed from the rule and the start is
always an occurrence; RDATE/EXDATE times are set to the start's time; UNTIL covers its whole day;
at most MAXCOUNT occurrences; none after ``until``.

The zone is the named zone ``tz`` when one is given, else the fixed offset of the start (UTC when
it has none). With ``tz``, a start without an offset is the wall-clock time in that zone (what
plone.event expands from); one with an offset is first converted to the zone. Placing a wall-clock
time in a named zone follows pytz's ``localize`` with ``is_dst=False``, which plone.event uses: in
the hour repeated when summer time ends, the later (standard time) instant; in the hour skipped
when it starts, the offset from before the change.
"""

from __future__ import annotations

import ctypes
import functools
import heapq
import importlib.resources
import itertools
import re
import threading
import time
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil import rrule

from .dates import MAX32, BadDate, parse_datetime

MAXCOUNT = 1000


class RecurrenceError(ValueError):
    pass


def _offset(start_text) -> timedelta | None:
    """The start's own UTC offset, or None if it has none."""
    try:
        parsed = datetime.fromisoformat(start_text.replace("Z", "+00:00")) if isinstance(start_text, str) else None
    except ValueError:
        parsed = None  # a form parse_datetime reads and fromisoformat does not: no offset of its own
    return parsed.utcoffset() if parsed is not None else None


_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*")


@functools.lru_cache(maxsize=256)
def named_zone(name: str) -> ZoneInfo:
    """The zone ``name`` from the tzdata package when it is installed, else from the system.

    Plone places occurrences with pytz, which carries its own copy of the IANA database; the
    tzdata package is pinned to the same release, while the system's copy may be older or newer
    and disagree on zones whose rules changed.
    """
    if not _ZONE_NAME.fullmatch(name):
        raise RecurrenceError(f"tz must be a time zone name, not {name!r}")
    try:
        resource = importlib.resources.files("tzdata.zoneinfo").joinpath(*name.split("/"))
        if resource.is_file():
            with resource.open("rb") as data:
                return ZoneInfo.from_file(data, key=name)
    except ModuleNotFoundError:
        pass
    except (ValueError, OSError) as exc:  # a data file of the package that is no zone
        raise RecurrenceError(f"unknown time zone {name!r}") from exc
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise RecurrenceError(f"unknown time zone {name!r}") from exc


def _zone(start_text: str, tz_name: str | None):
    if tz_name:
        if not isinstance(tz_name, str):  # before the cache, which cannot hash a list
            raise RecurrenceError(f"tz must be a time zone name, not {tz_name!r}")
        return named_zone(tz_name)
    offset = _offset(start_text)
    return UTC if offset is None else timezone(offset)


_SIX_HOURS = timedelta(hours=6)


def _localize(wall: datetime, zone) -> datetime:
    """The UTC instant of the naive wall-clock time ``wall`` in ``zone``, as pytz's
    ``zone.localize(wall, is_dst=False)`` gives it (plone.event localizes every occurrence so)."""
    if not isinstance(zone, ZoneInfo):
        return wall.replace(tzinfo=zone).astimezone(UTC)
    first = wall.replace(tzinfo=zone)
    second = wall.replace(tzinfo=zone, fold=1)
    if first.utcoffset() == second.utcoffset():
        return first.astimezone(UTC)  # the usual case: the wall time happens exactly once
    # zoneinfo gives the two folds different offsets in a skipped hour and in a repeated one
    # alike; only in a repeated hour does each of them read back as the same wall time.
    candidates = [c for c in (first, second)
                  if c.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall]
    if not candidates:
        # Skipped when the clocks went forward: pytz localizes six hours earlier and adds them.
        return _localize(wall - _SIX_HOURS, zone) + _SIX_HOURS
    standard = [c for c in candidates if not c.dst()]
    if len(standard) == 1:
        return standard[0].astimezone(UTC)
    # Both (or neither) standard time, as when a zone moves its standard offset back: pytz
    # takes the later instant.
    return max(c.astimezone(UTC) for c in standard or candidates)


def _indexed(wall: datetime, zone) -> datetime:
    """The instant DateRecurringIndex stores for the occurrence at wall-clock time ``wall``.

    plone.event localizes it as :func:`_localize` does, then ``dt2int`` reads it through
    ``pydt`` once more, which keeps the wall-clock time and takes the offset in force at that
    instant. Only in an hour skipped by a change to summer time does that move it: 02:30 at the
    standard offset is 03:30 summer time, so it becomes 02:30 at the summer offset.
    """
    local = _localize(wall, zone)
    if not isinstance(zone, ZoneInfo):
        return local
    return (wall - local.astimezone(zone).utcoffset()).replace(tzinfo=UTC)


def minutes(dt: datetime) -> int:
    """plone.event.utils.dt2int: calendar-shaped minutes in UTC."""
    dt = dt.astimezone(UTC)
    value = (((dt.year * 12 + dt.month) * 31 + dt.day) * 24 + dt.hour) * 60 + dt.minute
    if value > MAX32:
        raise BadDate(f"{dt} is not within the range of indexable dates")
    return value


# dateutil walks every period of a rule until it yields, so a rule that can never match (30
# February) at a fine frequency walks every minute to the year 9999: minutes of CPU for one
# entry, and a real rule's cost cannot be told from its text. So the expansion runs under a
# deadline: past it, the thread expanding the rule gets an exception raised into it (dateutil is
# pure Python, so it stops at its next step) and the rule is refused (RecurrenceError, a 422 for
# the batch) instead of holding a worker. Plone itself takes as long to expand such a rule. A
# real event's rule takes milliseconds.
EXPANSION_SECONDS = 1.0


class _DeadlinePassed(BaseException):
    """Raised into the expanding thread; a BaseException, so no ``except Exception`` eats it."""


def _raise_in(thread_id: int) -> None:
    """Make ``thread_id`` raise _DeadlinePassed at its next bytecode check. Never withdrawn with
    NULL: on Python 3.11 that leaves the interpreter's asynchronous-exception signal set, and the
    next traced function call (coverage, a debugger) loops forever."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(_DeadlinePassed))


def _take_delivery() -> None:
    """A function call: entering it checks for an asynchronous exception and raises it here."""


class _Watchdog:
    """One daemon thread per process that raises _DeadlinePassed into threads past their deadline.

    A ``threading.Timer`` per expansion started a thread per recurring event: about 0.5 ms each,
    as much as expanding a weekly rule, and a tenth of the service's conversion time in a bulk
    load of Plone-like content. Here an expansion costs a heap push and a dictionary entry.
    """

    def __init__(self) -> None:
        # The lock is taken directly (C code) where an exception may be pending for the caller:
        # Condition.__exit__ is Python, and an exception raised on entering it would leave the
        # lock held for good.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._heap: list[tuple[float, int]] = []  # (deadline, token), cancelled tokens left in
        self._waiting: dict[int, int] = {}  # token -> thread id, until finished or fired
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float) -> int:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():  # first use, or after a fork
                self._thread = threading.Thread(target=self._run, name="recurrence-deadline", daemon=True)
                self._thread.start()
            token = next(self._tokens)
            self._waiting[token] = threading.get_ident()
            heapq.heappush(self._heap, (time.monotonic() + seconds, token))
            if self._heap[0][1] == token:
                self._cond.notify()
            return token

    def disarm(self, token: int) -> None:
        """Called when the expansion ended. If the deadline fired, its exception is taken here at
        the latest (it may already have been raised), so it cannot surface later in unrelated code
        of this thread; raised before ``_take_delivery``, it propagates as a passed deadline."""
        with self._lock:
            fired = self._waiting.pop(token, None) is None
        if fired:
            try:  # noqa: SIM105 - contextlib.suppress enters Python code first, where it would be raised
                _take_delivery()
            except _DeadlinePassed:
                pass

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][1] not in self._waiting:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, token = self._heap[0]
                delay = deadline - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)
                _raise_in(self._waiting.pop(token))


_watchdog = _Watchdog()


def _with_deadline(func, seconds: float):
    try:
        token = _watchdog.arm(seconds)
        try:
            return func()
        finally:
            _watchdog.disarm(token)
    except _DeadlinePassed:
        raise RecurrenceError(f"recurrence rule cannot be expanded within {seconds:g} s (it matches "
                              f"too rarely for its frequency)") from None


def _collect(rset, zone, until_dt, maxcount: int) -> list[int]:
    found: set[int] = set()
    try:
        for count, occurrence in enumerate(rset):
            if count + 1 > maxcount:
                break
            local = _indexed(occurrence, zone)
            if until_dt is not None and local > until_dt:
                break
            found.add(minutes(local))
    except (ValueError, OverflowError) as exc:
        raise RecurrenceError(f"recurrence cannot be expanded: {exc}") from exc
    return sorted(found)


def _start(start, until, tz_name):
    """The event's zone, its start as a naive local time, and the UTC end of the expansion."""
    if isinstance(start, dict):
        raise RecurrenceError("start must be a date")
    parsed = parse_datetime(start)  # first: an impossible date (30 February) is a BadDate
    zone = _zone(start, tz_name)
    if tz_name and isinstance(start, str) and _offset(start) is None:
        wall = parsed.replace(tzinfo=None)  # read as UTC, so the same digits: the zone's wall clock
    else:
        wall = parsed.astimezone(zone).replace(tzinfo=None)
    until_dt = parse_datetime(until).replace(microsecond=0) if until else None
    return zone, wall.replace(microsecond=0), until_dt


def _parse(start, rule, until, tz_name):
    zone, naive_start, until_dt = _start(start, until, tz_name)

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
    if not rule:
        # The start alone (the common case: most events do not recur), as _collect would give it
        # for a rule set holding only the start, without building one.
        zone, naive_start, until_dt = _start(start, until, tz_name)
        try:
            local = _indexed(naive_start, zone)
            if maxcount < 1 or (until_dt is not None and local > until_dt):
                return []
            return [minutes(local)]
        except (ValueError, OverflowError) as exc:
            raise RecurrenceError(f"recurrence cannot be expanded: {exc}") from exc
    zone, naive_start, until_dt, rset = _parse(start, rule, until, tz_name)
    return _with_deadline(lambda: _collect(rset, zone, until_dt, maxcount), EXPANSION_SECONDS)


__all__ = ["MAXCOUNT", "RecurrenceError", "minutes", "occurrences"]
