"""DateRecurringIndex values as the connector extracts them: the start as plone.event reads it,
and its zone by name when it has one, so that the service expands the rule in that zone.

No Plone site is needed: the extraction reads attributes of any object.
"""

from __future__ import annotations

import datetime as dt
import types
from zoneinfo import ZoneInfo

import pytest
import pytz
from DateTime import DateTime
from dateutil import tz as dateutil_tz

from plone_connector.catalog.extraction import recurring, zone_name

BERLIN = pytz.timezone("Europe/Berlin")
RULE = "RRULE:FREQ=WEEKLY;COUNT=3"


def _index():
    return types.SimpleNamespace(id="start", attr_recurdef="recurrence", getUntilField=lambda: "recurrence_until")


def _event(start, recurrence=RULE, until=None):
    return types.SimpleNamespace(start=start, recurrence=recurrence, recurrence_until=until)


@pytest.mark.parametrize(("tzinfo", "name"), [
    (BERLIN, "Europe/Berlin"),
    (BERLIN.localize(dt.datetime(2024, 7, 1)).tzinfo, "Europe/Berlin"),
    (pytz.utc, "UTC"),
    (ZoneInfo("America/New_York"), "America/New_York"),
    (dateutil_tz.gettz("Australia/Sydney"), "Australia/Sydney"),
    (pytz.FixedOffset(120), None),
    (dt.timezone(dt.timedelta(hours=2)), None),
    (dt.UTC, None),
])
def test_zone_names(tzinfo, name):
    assert zone_name(tzinfo) == name


def test_a_plone_app_event_start_travels_as_wall_clock_time_and_zone_name():
    start = BERLIN.localize(dt.datetime(2024, 3, 21, 10, 0, 0, 123456))
    until = BERLIN.localize(dt.datetime(2024, 4, 30, 12, 0))
    assert recurring(_index(), _event(start, until=until)) == {
        "start": "2024-03-21T10:00:00",  # plone.event drops the microseconds
        "tz": "Europe/Berlin",
        "recurrence": RULE,
        "until": "2024-04-30T10:00:00+00:00",
    }


def test_a_datetime_in_a_zone_pytz_knows_expands_in_that_zone():
    value = recurring(_index(), _event(DateTime(2024, 3, 21, 10, 0, 0, "US/Eastern")))
    assert (value["start"], value["tz"]) == ("2024-03-21T10:00:00", "US/Eastern")


def test_a_datetime_in_an_offset_zone_expands_in_utc():
    # plone.event's pydt turns a DateTime whose zone pytz does not know (GMT+2) into UTC, and the
    # rule (its UNTIL day, its EXDATE times) is read on UTC wall-clock times.
    value = recurring(_index(), _event(DateTime(2024, 3, 21, 1, 0, 0, "GMT+2")))
    assert (value["start"], value["tz"]) == ("2024-03-20T23:00:00", "UTC")


def test_a_fixed_offset_travels_as_an_offset():
    value = recurring(_index(), _event(pytz.FixedOffset(120).localize(dt.datetime(2024, 3, 21, 10))))
    assert value == {"start": "2024-03-21T10:00:00+02:00", "recurrence": RULE, "until": None}


def test_a_start_without_a_rule_is_the_instant_pydt_gives():
    # pytz placed 02:30 (skipped on 31 March in Berlin) at +01:00; pydt keeps the wall-clock time
    # and takes the offset the zone has after the change (+02:00), and dt2int reads that through
    # pydt once more, back at +01:00: DateRecurringIndex stores 01:30 UTC.
    start = BERLIN.localize(dt.datetime(2024, 3, 31, 2, 30))
    assert recurring(_index(), _event(start, recurrence=None)) == {
        "start": "2024-03-31T01:30:00+00:00", "recurrence": None, "until": None}
    assert recurring(_index(), _event(dt.datetime(2024, 3, 31, 2, 30), recurrence=None))["start"] == (
        "2024-03-31T02:30:00+00:00")  # naive: UTC, as pydt reads it


def test_no_start_is_not_indexed():
    from plone_connector.catalog.extraction import NOT_INDEXED

    assert recurring(_index(), _event(None)) is NOT_INDEXED
    assert recurring(_index(), types.SimpleNamespace()) is NOT_INDEXED


# Wall-clock times in the hour skipped when the clocks go forward. pytz places them at the
# standard offset, and DateRecurringIndex reads a value twice through pydt (once itself, once in
# dt2int's utc()), which can move the instant pydt returned first.
SKIPPED = [
    DateTime("2020/03/29 02:00:00 Europe/Berlin"),
    DateTime("2019/03/10 02:30:00 US/Eastern"),
    BERLIN.localize(dt.datetime(2020, 3, 29, 2, 15)),
    pytz.timezone("America/New_York").localize(dt.datetime(2019, 3, 10, 2, 0)),
]


@pytest.mark.parametrize("start", SKIPPED)
@pytest.mark.parametrize(("rule", "until"), [
    (None, None),
    ("RRULE:FREQ=DAILY;INTERVAL=2;COUNT=5", None),
    ("RRULE:FREQ=WEEKLY", DateTime("2020/04/26 02:30:00 Europe/Berlin")),
    ("RRULE:FREQ=DAILY", BERLIN.localize(dt.datetime(2020, 3, 29, 2, 30))),
])
def test_starts_and_ends_in_a_skipped_hour_index_as_datereccuringindex_does(start, rule, until):
    from plone.event.recurrence import recurrence_sequence_ical
    from plone.event.utils import dt2int, pydt

    from catalog_service.indexes.recurrence import occurrences

    # What Products.DateRecurringIndex.index_object stores.
    dates = [pydt(start)] if not rule else recurrence_sequence_ical(start, recrule=rule, until=until)
    expected = sorted({dt2int(d) for d in dates})
    value = recurring(_index(), _event(start, recurrence=rule, until=until))
    found = occurrences(value["start"], value["recurrence"], value["until"], value.get("tz"))
    assert found == expected
