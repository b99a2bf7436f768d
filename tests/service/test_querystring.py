"""catalog_service.public.querystring without Plone: dates read as DateTime reads them, search
terms munged as Plone munges them, errors named. The comparison with plone.app.querystring on a
real site is tests/connector/test_querystring.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from DateTime import DateTime
from hypothesis import given
from hypothesis import strategies as st
from plone.base.utils import munge_search_term as plone_munge

from catalog_service.errors import QueryError
from catalog_service.indexes.dates import parse_datetime
from catalog_service.public import querystring as qs

NOW = datetime(2025, 3, 29, 22, 30, tzinfo=UTC)
P = qs.PREFIX
PLACE = qs.Place("/plone", "/plone/news/coll", NOW, user_id="bob", roles=("Member", "Authenticated"))


def parse(criteria, place=PLACE, answers=None, **kw):
    answers = answers or {}
    return qs.run(qs.parse_formquery(criteria, place, **kw), lambda question: answers.get(question))


@given(st.datetimes(min_value=datetime(1583, 1, 1), max_value=datetime(9999, 1, 1)),
       st.sampled_from(["%Y-%m-%d", "%Y-%m-%dT%H", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f",
                        "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S+05:00", "%Y-%m-%dT%H:%M:%S-0300", "%Y-%m",
                        "%Y"]))
def test_iso_dates_read_as_datetime_reads_them(moment, form):
    text = moment.strftime(form)
    ours = (qs.datetime_of(text, PLACE) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    assert abs(ours - DateTime(text).micros()) <= 1


@given(st.one_of(st.integers(-10**10, 10**10), st.floats(-1e10, 1e10, allow_nan=False), st.booleans()))
def test_numbers_are_seconds_since_the_epoch(value):
    assert qs.datetime_of(value, PLACE).timestamp() == pytest.approx(DateTime(value).timeTime(), abs=1e-3)


@pytest.mark.parametrize("value", ["", "  ", "abc", [1, 2], {}, "2025-02-30", "2025-01-15T25:00"])
def test_no_dates_to_datetime_take_the_fallback(value):
    with pytest.raises(Exception) as plone:
        DateTime(value)
    assert "DateTimeError" in [cls.__name__ for cls in type(plone.value).__mro__]
    assert parse([{"i": "created", "o": P + "date.lessThan", "v": value}]) == {"created": {"query": value}}
    start = parse([{"i": "created", "o": P + "date.between", "v": [value, value]}])["created"]["query"]
    assert start == [datetime(1970, 1, 1, tzinfo=UTC), NOW]


@pytest.mark.parametrize("value", ["2025/01/15", "15.01.2025", "1", "2025-01-15T10:00:00-05:30", "2025-1-5",
                                   "1582-10-01"])
def test_dates_only_datetime_guesses_are_refused(value):
    with pytest.raises(qs.UnsupportedDate):
        parse([{"i": "created", "o": P + "date.lessThan", "v": value}])


@given(st.text(alphabet=st.sampled_from(list('ab "()-+*?\u3000AND or Not x1')), max_size=30))
def test_search_terms_munged_as_plone_munges_them(text):
    assert qs.munge_search_term(text) == plone_munge(text)


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York", "Asia/Tokyo", "UTC"])
def test_days_begin_at_midnight_of_the_zone(zone):
    place = qs.Place("/plone", "/plone", NOW, tz=ZoneInfo(zone))
    today = parse([{"i": "start", "o": P + "date.today"}], place)["start"]["query"]
    local = NOW.astimezone(ZoneInfo(zone))
    assert today[0].astimezone(ZoneInfo(zone)) == local.replace(hour=0, minute=0, second=0, microsecond=0)
    assert today[1].astimezone(ZoneInfo(zone)) == local.replace(hour=23, minute=59, second=59, microsecond=0)
    # Three days on across the change to summer time in Berlin: elapsed days, then that day's end.
    ahead = parse([{"i": "start", "o": P + "date.lessThanRelativeDate", "v": 3}], place)["start"]["query"]
    assert ahead[1] == datetime.combine((NOW + timedelta(days=3)).astimezone(ZoneInfo(zone)).date(),
                                        datetime.max.time().replace(microsecond=0), ZoneInfo(zone))


def test_unknown_and_unimplemented_operations_are_named():
    with pytest.raises(qs.UnknownOperation) as unknown:
        parse([{"i": "x", "o": "plone.app.querystring.operation.string.nope", "v": 1}])
    assert isinstance(unknown.value, QueryError) and unknown.value.status == 400
    assert P + "selection.any" in unknown.value.extra["valid"]
    with pytest.raises(qs.UnknownOperation):
        parse([{"i": "path", "o": P + "path.isWithin", "v": "/"}])


@pytest.mark.parametrize("criteria", [
    "portal_type", [1], [{"o": P + "string.is"}], [{"i": "path", "o": P + "string.path", "v": 3}],
    [{"i": "path", "o": P + "string.absolutePath", "v": "::1"}],
    [{"i": "created", "o": P + "date.between", "v": "2025-01-01"}],
    [{"i": "created", "o": P + "date.lessThanRelativeDate", "v": None}],
])
def test_criteria_plone_fails_on_are_400(criteria):
    with pytest.raises(qs.QuerystringError):
        parse(criteria)


def test_paths_and_lookups():
    answers = {qs.PathOfUid("abc"): "/plone/news/a", qs.IsObject("/plone/news/sub"): True,
               qs.UidOfPath("/plone/news/a"): "uid-a"}
    assert parse([{"i": "path", "o": P + "string.absolutePath", "v": "abc::1"}], answers=answers) == {
        "path": {"depth": 1, "query": ["/plone/news/a"]}}
    # An unknown UID: the site root, as Plone answers it.
    assert parse([{"i": "path", "o": P + "string.absolutePath", "v": "nope"}]) == {"path": {"query": ["/plone"]}}
    assert parse([{"i": "path", "o": P + "string.relativePath", "v": "../sub/missing::2"}], answers=answers) == {
        "path": {"depth": 2, "query": ["/plone/news/sub"]}}
    # Never above the site: the walk stops there.
    assert parse([{"i": "path", "o": P + "string.relativePath", "v": "../../../news"}]) == {
        "path": {"query": ["/plone"]}}
    assert parse([{"i": "UID", "o": P + "reference.is", "v": "/news/a"}], answers=answers) == {"UID": "uid-a"}
    two = parse([{"i": "path", "o": P + "string.absolutePath", "v": "/a::1"},
                 {"i": "path", "o": P + "string.absolutePath", "v": "/b::3"}])
    assert two == {"path": {"depth": 1, "query": ["/plone/a", "/plone/b"]}}


def test_callers_from_principals():
    member = qs.place_for_principals("/plone", "/plone", ("user:bob", "Member", "Authenticated", "user:staff",
                                                          "Anonymous"), NOW)
    assert (member.user_id, member.roles) == ("bob", ("Member", "Authenticated"))
    anonymous = qs.place_for_principals("/plone", "/plone", ("Anonymous",), NOW)
    assert (anonymous.user_id, anonymous.roles) == (None, ("Anonymous",))
    assert parse([{"i": "show_inactive", "o": P + "string.showInactive", "v": ["Member"]}], member) == {
        "show_inactive": True}
    assert parse([{"i": "Creator", "o": P + "string.currentUser"}], member) == {"Creator": {"query": "bob"}}


def test_builder_steps_and_wire_form():
    indexes = {"portal_type", "path", "created", "SearchableText", "sortable_title"}
    built = qs.run(qs.querystring_query(
        [{"i": "created", "o": P + "string.is", "v": "2025-03-01T10:00:00"},
         {"i": "SearchableText", "o": P + "string.contains", "v": "red bl"},
         {"i": "nonsense", "o": P + "string.is", "v": "x"}],
        qs.Place("/plone", "/plone", NOW, tz=ZoneInfo("Europe/Berlin")), indexes,
        sort_on=["sortable_title", "nope"], sort_order="reverse", limit=3,
        custom_query={"UID": {"not": "ctx"}}), lambda q: None)
    assert built.limit == 3 and not built.empty
    assert built.query["path"] == {"query": ["/plone/"]}  # the navigation root, as Plone adds it
    assert built.query["SearchableText"] == "red* AND bl*"
    assert built.query["sort_on"] == ["sortable_title"] and built.query["sort_limit"] == 3
    assert "nonsense" not in built.query and "UID" not in built.query  # no such indexes here
    wire = qs.to_wire(built.query)
    # dateutil's naive time is the server's (Berlin's) time, as DateIndex reads it.
    assert parse_datetime(wire["created"]["query"]) == datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    nothing = qs.run(qs.querystring_query([{"i": "nonsense", "o": P + "string.is", "v": "x"}], PLACE, indexes - {"path"}),
                     lambda q: None)
    assert nothing.empty
