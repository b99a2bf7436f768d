"""Naive dates read in the Plone process's local zone, as ZCatalog reads them.

DateIndex reads a naive datetime as local time (``index_naive_time_as_local``, the default) or
as UTC; DateRangeIndex, through DateTime, as local time; a DateTime made without a zone holds
local time too. The service cannot know the Plone process's zone, so the connector sends these
values as instants. Here a Plone-side process runs with a zone that is not UTC
(naive_dates_probe.py: ZCatalog's own indexes and the connector's conversions, for index values
and query values), and the service must answer each query with the objects ZCatalog found.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.service.oracle import ServiceCatalog, service_client_fixture  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def _probe(zone: str) -> dict:
    env = {**os.environ, "TZ": zone}
    done = subprocess.run([sys.executable, "-m", "tests.connector.naive_dates_probe"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/St_Johns"])
def test_naive_dates_answer_as_in_zcatalog(service_client, zone):
    from tests.connector.naive_dates_probe import INDEXES

    probe = _probe(zone)
    assert "UTC" not in probe["tzname"], probe["tzname"]  # the zone took effect in the probe
    catalog = ServiceCatalog(service_client, f"naive-{uuid.uuid4().hex[:12]}", INDEXES, [])
    try:
        catalog.load(probe["entries"])
        wrong = []
        for case in probe["cases"]:
            status, body = catalog.query(case["query"])
            got = sorted(item["uid"] for item in body["items"]) if status == 200 else (status, body)
            if got != case["uids"]:
                wrong.append(f"{case['shown']} sent as {case['query']}: ZCatalog {case['uids']}, service {got}")
        assert not wrong, "\n".join(wrong)
    finally:
        catalog.drop()
