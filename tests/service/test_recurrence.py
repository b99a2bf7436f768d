"""DateRecurringIndex values without a rule: the direct path gives what the rule-set expansion gives.

``occurrences`` answers a start without a recurrence rule without building a dateutil rule set
(most events do not recur, and the rule set was a quarter of a rebuild's conversion time). The
general expansion, fed the same start, is the oracle.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog_service.indexes.dates import BadDate, parse_datetime
from catalog_service.indexes.recurrence import RecurrenceError, _collect, _parse, occurrences

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
