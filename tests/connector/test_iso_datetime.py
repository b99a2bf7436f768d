"""A DateTime goes to the service as the instant it holds, the one DateIndex indexes
(``toZone('UTC').parts()``), also for a wall time in its zone's summer-time gap, where
``ISO8601()`` is an hour away from it (found by tests/service/test_differential_unique.py)."""

from __future__ import annotations

import datetime as dt

import pytest
from DateTime import DateTime
from Products.PluginIndexes.DateIndex.DateIndex import DateIndex

from plone_connector.catalog.wire import iso_datetime

CASES = [
    (2024, 3, 31, 2, 30, 0, "Europe/Berlin"),  # in the gap: 02:00-03:00 does not exist that day
    (2025, 3, 30, 2, 0, 0, "Europe/Berlin"),
    (2024, 3, 10, 2, 15, 0, "US/Eastern"),
    (2024, 10, 27, 2, 30, 0, "Europe/Berlin"),  # in the hour that comes twice
    (2024, 3, 31, 0, 0, 0, "Europe/Berlin"),
    (2026, 1, 2, 3, 4, 5.123456, "UTC"),
    (2026, 7, 2, 3, 4, 5, "Asia/Kolkata"),
    (1850, 1, 1, 0, 0, 0, "Europe/Amsterdam"),  # local mean time
]


@pytest.mark.parametrize("args", CASES, ids=lambda a: f"{a[0]}-{a[1]}-{a[2]}T{a[3]}:{a[4]} {a[6]}")
def test_the_instant_date_index_reads(args):
    value = DateTime(*args)
    sent = dt.datetime.fromisoformat(iso_datetime(value))
    assert sent.tzinfo is not None
    utc = sent.astimezone(dt.UTC)
    assert (utc.year, utc.month, utc.day, utc.hour, utc.minute) == tuple(value.toZone("UTC").parts()[:5])
    assert round(utc.timestamp() * 1_000_000) == value.micros()
    # What the service computes of it for a DateIndex is what ZCatalog's DateIndex stores.
    minutes = ((((utc.year * 12 + utc.month) * 31 + utc.day) * 24 + utc.hour) * 60 + utc.minute)
    assert minutes == DateIndex("d")._convert(value)


def test_a_datetime_without_a_zone_keeps_its_instant():
    value = DateTime("2026/01/02 03:04")  # the process's local zone, which ISO8601() leaves out
    sent = dt.datetime.fromisoformat(iso_datetime(value))
    assert sent.tzinfo is not None and round(sent.timestamp() * 1_000_000) == value.micros()
