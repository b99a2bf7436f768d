"""DateRecurringIndex expansion.

``occurrences`` answers a start without a recurrence rule without building a dateutil rule set
(most events do not recur, and the rule set was a quarter of a rebuild's conversion time). The
general expansion, fed the same start, is the oracle.

In a named zone, occurrences keep their wall-clock time across changes of summer time and are
placed as pytz places them (plone.event's way); the end of this file checks that.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog_service.indexes.dates import BadDate, parse_datetime
from catalog_service.indexes.recurrence import (
    RecurrenceError,
    _collect,
    _localize,
    _parse,
    minutes,
    named_zone,
    occurrences,
)

ZONES = [None, "UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Pacific/Chatham"]


def general(start, until, tz_name, maxcount=1000):
    """The rule-set expansion of a start alone, as every value took before the direct path."""
    zone, _, until_dt, rset = _parse(start, None, until, tz_name)
    return _collect(rset, zone, until_dt, maxcount)


def outcome(func, *args):
    try:
        return ("ok", func(*args))
    except (RecurrenceError, BadDate) as exc:
        return ("error", type(exc).__name__)


instants = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9998, 12, 30))
offsets = st.sampled_from(["", "Z", "+02:00", "-05:30", "+14:00"])


@settings(max_examples=300, deadline=None)
@given(start=instants, offset=offsets, zone=st.sampled_from(ZONES),
       until_shift=st.one_of(st.none(), st.just(0), st.integers(-3 * 86400, 3 * 86400)),
       maxcount=st.sampled_from([0, 1, 1000]))
def test_a_start_alone_matches_the_rule_set_expansion(start, offset, zone, until_shift, maxcount):
    text = start.isoformat() + offset
    # The end of the expansion near the start's own instant, so that both sides of the comparison
    # with it come up (a shift of 0 is the start itself).
    utc_start = parse_datetime(text) if until_shift is not None else None
    until = None if until_shift is None else (utc_start + timedelta(seconds=until_shift)).isoformat()
    direct = outcome(lambda: occurrences(text, None, until, zone, maxcount=maxcount))
    expanded = outcome(lambda: general(text, until, zone, maxcount=maxcount))
    assert direct == expanded


@pytest.mark.parametrize("rule", [None, ""])
def test_no_rule_is_the_start_in_calendar_minutes(rule):
    start = datetime(2024, 3, 31, 1, 30, tzinfo=UTC)
    assert occurrences(start.isoformat(), rule) == [(((2024 * 12 + 3) * 31 + 31) * 24 + 1) * 60 + 30]
    # An until at the start keeps it; one before leaves nothing, as the expansion stops there.
    assert occurrences(start.isoformat(), rule, until=start.isoformat()) == occurrences(start.isoformat(), rule)
    assert occurrences(start.isoformat(), rule, until="2024-03-30T00:00:00+00:00") == []


def test_beyond_the_indexable_range_is_refused_like_the_expansion():
    assert outcome(occurrences, "9000-01-01T00:00:00+00:00", None) == outcome(general, "9000-01-01T00:00:00+00:00",
                                                                             None, None)
    assert outcome(occurrences, "9000-01-01T00:00:00+00:00", None)[0] == "error"


# --- named zones: occurrences keep their wall-clock time across changes of summer time ------

# Zones with summer time on both hemispheres, half-hour and 45-minute offsets, a zone whose
# summer shift is 30 minutes (Lord Howe) and one whose "summer" is negative (Dublin).
NAMED = ["Europe/Berlin", "America/New_York", "Australia/Sydney", "Pacific/Chatham", "Australia/Lord_Howe",
         "Europe/Dublin", "America/St_Johns", "Africa/Casablanca", "Asia/Kolkata", "UTC"]


@pytest.mark.parametrize("name", NAMED)
def test_wall_clock_times_are_placed_as_pytz_places_them(name):
    """plone.event places every occurrence with pytz's ``localize`` (is_dst=False): checked at
    every wall-clock time within three hours of each change of offset, 1970-2037, including the
    hours a change skips or repeats. Both read the same IANA release (pytz and tzdata are pinned
    together); a failure after upgrading one of them alone is the data, not the code."""
    import pytz

    reference = pytz.timezone(name)
    zone = named_zone(name)
    changes = [t for t in getattr(reference, "_utc_transition_times", []) if 1970 <= t.year <= 2037]
    walls = [change + timedelta(minutes=m) for change in changes for m in range(-180, 181, 15)]
    walls.append(datetime(2024, 6, 1, 12, 0))
    wrong = [(wall, reference.localize(wall).astimezone(UTC), _localize(wall, zone)) for wall in walls
             if reference.localize(wall).astimezone(UTC) != _localize(wall, zone)]
    assert wrong == []


def _minute(text: str) -> int:
    return minutes(datetime.fromisoformat(text))


def test_a_weekly_rule_keeps_its_wall_clock_time_across_the_change_to_summer_time():
    # Thursdays 10:00 in Berlin: 09:00 UTC before 31 March 2024, 08:00 UTC after.
    found = occurrences("2024-03-21T10:00:00", "RRULE:FREQ=WEEKLY;COUNT=3", tz_name="Europe/Berlin")
    assert found == [_minute("2024-03-21T09:00:00+00:00"), _minute("2024-03-28T09:00:00+00:00"),
                     _minute("2024-04-04T08:00:00+00:00")]
    # The same start given as an instant is converted to the zone's wall clock first.
    assert occurrences("2024-03-21T09:00:00Z", "RRULE:FREQ=WEEKLY;COUNT=3", tz_name="Europe/Berlin") == found
    # Without the zone only the offset is known: the occurrences stay at 09:00 UTC.
    assert occurrences("2024-03-21T10:00:00+01:00", "RRULE:FREQ=WEEKLY;COUNT=3")[-1] == _minute(
        "2024-04-04T09:00:00+00:00")


def test_skipped_and_repeated_hours_are_placed_as_datereccuringindex_stores_them():
    # 02:30 does not exist on 31 March 2024 in Berlin. pytz places it at the offset before the
    # change (01:30 UTC), and dt2int reads that through pydt again, which keeps 02:30 and takes
    # the summer offset: DateRecurringIndex stores 00:30 UTC (checked against plone.event in
    # tests/connector/test_extraction_recurrence.py).
    assert occurrences("2024-03-30T02:30:00", "RRULE:FREQ=DAILY;COUNT=2", tz_name="Europe/Berlin") == [
        _minute("2024-03-30T01:30:00+00:00"), _minute("2024-03-31T00:30:00+00:00")]
    # 02:30 happens twice on 27 October 2024: the later, standard-time one (01:30 UTC).
    assert occurrences("2024-10-26T02:30:00", "RRULE:FREQ=DAILY;COUNT=2", tz_name="Europe/Berlin") == [
        _minute("2024-10-26T00:30:00+00:00"), _minute("2024-10-27T01:30:00+00:00")]


def test_until_and_exdate_name_local_days():
    # UNTIL covers its whole local day (the 29th), EXDATE takes the start's wall-clock time (the
    # 27th, 23:30 local): evening occurrences fall on the next UTC day.
    rule = "RRULE:FREQ=DAILY;UNTIL=20241029T000000Z\nEXDATE:20241027T000000Z"
    found = occurrences("2024-10-25T23:30:00", rule, tz_name="America/New_York")
    assert found == [_minute(f"2024-10-{day}T03:30:00+00:00") for day in (26, 27, 29, 30)]


@pytest.mark.parametrize("tz", ["Nowhere/Else", "../../etc/passwd", "Europe", "leapseconds", 5, ["UTC"]])
def test_an_unknown_zone_is_refused(tz):
    with pytest.raises(RecurrenceError):
        occurrences("2024-03-21T10:00:00", "RRULE:FREQ=WEEKLY;COUNT=3", tz_name=tz)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_connectors_value_expands_to_plone_events_occurrences(data):
    """What plone.event gives DateRecurringIndex for a start (DateTime or pytz datetime, in named
    and fixed zones, often weeks before a change of summer time) and a rule (DAILY/WEEKLY/MONTHLY,
    COUNT or UNTIL, EXDATE, an until date) is what the service expands from the connector's value.
    The whole differential test (test_differential.py) checks the same through queries."""
    from plone.event.recurrence import recurrence_sequence_ical
    from plone.event.utils import dt2int

    from plone_connector.catalog.extraction import recurrence_value
    from tests.service.strategies import recurrence_starts, recurrences, shift_days

    start = data.draw(recurrence_starts(), label="start")
    rule = data.draw(recurrences(start), label="rule")
    until = data.draw(st.one_of(st.none(), st.integers(0, 60).map(lambda days: shift_days(start, days))),
                      label="until")
    want = sorted({dt2int(date) for date in recurrence_sequence_ical(start, recrule=rule, until=until)})
    value = recurrence_value(start, rule, until)
    assert occurrences(value["start"], value["recurrence"], value["until"], value.get("tz")) == want
