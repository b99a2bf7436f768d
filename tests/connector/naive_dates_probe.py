"""Run in a process whose local zone is not UTC (``TZ`` set before anything is imported):
catalogues naive and zone-less date values in ZCatalog's own DateIndex and DateRangeIndex, and
prints, as JSON, what the connector sends the service for them (entries and queries) with the
uids ZCatalog answers to each query. test_naive_dates.py replays that against the service.

A separate process, because DateIndex fixes its idea of the local zone when it is imported.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
import types

from DateTime import DateTime

from catalog_schemas.api import IndexDeclaration
from plone_connector.catalog.extraction import NOT_INDEXED, index_value
from plone_connector.catalog.wire import query_value, wire_query_value
from tests.service.oracle import CatalogObject, ZCatalogOracle

INDEXES = [
    IndexDeclaration(name="local", type="DateIndex", indexed_attrs=["when"]),
    IndexDeclaration(name="utc", type="DateIndex", indexed_attrs=["when"], index_naive_time_as_local=False),
    IndexDeclaration(name="range", type="DateRangeIndex", since_field="since", until_field="until"),
]

# Winter and summer, the hour skipped on 31 March and the one repeated on 27 October 2024 (both
# in Europe; other zones change on other days or not at all), with and without seconds.
NAIVE = [
    dt.datetime(2024, 1, 15, 10, 0),
    dt.datetime(2024, 7, 15, 10, 0, 30),
    dt.datetime(2024, 3, 31, 2, 30),
    dt.datetime(2024, 10, 27, 2, 30),
    dt.datetime(2024, 11, 3, 1, 30),
    dt.datetime(1999, 12, 31, 23, 59, 59, 999999),
]
VALUES = NAIVE + [
    DateTime("2024/07/15 10:00"),  # a DateTime made without a zone: local time, "timezone naive"
    DateTime(dt.datetime(2024, 1, 15, 10, 0)),  # likewise, from a naive datetime
    DateTime("2024-07-15 11:00"),  # ISO text without a zone: DateTime reads it as UTC
    DateTime(2024, 7, 15, 10, 0, 0, "Europe/Berlin"),
    dt.datetime(2024, 7, 15, 10, 0, tzinfo=dt.timezone(dt.timedelta(hours=-4))),
    dt.date(2024, 7, 15),
]

# Query text, which both index types read through DateTime: a form other than ISO 8601 without a
# zone in the local zone ("2024/07/15 10:00"), an ISO one as UTC.
TEXT = ["2024/07/15 10:00", "2024/07/15 11:00", "2024/01/15 10:00:00", "2024/07/15", "2024-07-15 11:00"]


def _is_datetime(value) -> bool:
    return isinstance(value, dt.datetime | DateTime)


def _later(value, minutes: int):
    return value + (minutes / 1440 if isinstance(value, DateTime) else dt.timedelta(minutes=minutes))


def _queries(kind: str) -> list:
    """Plain values, lists, ``not`` and ranges whose bounds fall within the hours the local zone
    moves a naive time by, so that reading them in the wrong zone changes the answer."""
    found = []
    for value in VALUES:
        if kind == "DateRangeIndex":
            # Objects are "in range" from their value for two hours.
            if _is_datetime(value):
                found += [value, _later(value, -30), _later(value, 90), _later(value, 150)]
            continue
        found.append(value)
        if _is_datetime(value):
            found += [{"query": _later(value, -90), "range": "min"}, {"query": _later(value, 90), "range": "max"},
                      {"query": [_later(value, -30), _later(value, 30)], "range": "min:max"},
                      {"query": [value, dt.datetime(2000, 1, 1)], "not": value}]
    for text in TEXT:
        found.append(text)
        if kind != "DateRangeIndex":
            found += [{"query": text, "range": "min"}, {"query": text, "range": "max"},
                      {"query": [text, "2024/12/31 23:00"], "range": "min:max"},
                      {"query": [text, "2000/01/01"], "not": text}]
    return found


def main() -> None:
    oracle = ZCatalogOracle(INDEXES)
    objects = []
    for number, value in enumerate(VALUES):
        attrs = {"when": value}
        if _is_datetime(value):
            attrs.update(since=value, until=_later(value, 120))
        objects.append(CatalogObject(uid=f"u{number:02d}", path=f"/plone/o{number:02d}", attrs=attrs))
    for obj in objects:
        oracle.index(obj)
    catalog = oracle.catalog._catalog
    entries = []
    for obj in objects:
        content = types.SimpleNamespace(**obj.attrs)
        values = {}
        for decl in INDEXES:
            value = index_value(catalog.getIndex(decl.name), content)
            if value is not NOT_INDEXED:
                values[decl.name] = value
        entries.append({"op": "index", "uid": obj.uid, "path": obj.path, "values": values, "metadata": {}})
    cases = []
    for decl in INDEXES:
        index = catalog.getIndex(decl.name)
        for query in _queries(decl.type):
            cases.append({
                "query": {decl.name: wire_query_value(query_value(index, query))},
                "shown": f"{decl.name}: {query!r}",
                "uids": sorted(oracle.search({decl.name: query})),
            })
    json.dump({"tzname": list(time.tzname), "entries": entries, "cases": cases}, sys.stdout)


if __name__ == "__main__":
    main()
