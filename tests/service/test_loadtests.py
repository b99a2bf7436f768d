"""The locust scenarios (loadtests/locustfile.py) run against the real service for a few seconds.

Every kind of user runs (anonymous visitors, the connector's queries, the indexer's staged and
committed batches) on a demo catalog the locustfile creates; a scenario whose requests fail, or
that sends none, fails the test.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_locust_scenarios_run_without_failures(live_service, tmp_path):
    catalog = "load-" + uuid.uuid4().hex[:8]
    env = {**os.environ, "CATALOG_ID": catalog, "CATALOG_TOKEN": live_service.admin_token,
           "LOADTEST_OBJECTS": "1200", "LOADTEST_BATCH": "20"}
    out = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(ROOT / "loadtests" / "locustfile.py"), "--headless",
         "-u", "6", "-r", "6", "-t", "8s", "--host", live_service.url, "--csv", str(tmp_path / "run"),
         "--only-summary"],
        env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    with open(tmp_path / "run_stats.csv") as f:
        rows = {row["Name"]: row for row in csv.DictReader(f)}
    requests = {name: int(row["Request Count"]) for name, row in rows.items() if name != "Aggregated"}
    failures = {name: int(row["Failure Count"]) for name, row in rows.items() if name != "Aggregated"}
    assert not any(failures.values()), (failures, out.stderr[-3000:])
    # Each kind of user sent requests: a search of the anonymous visitor, a query of the connector,
    # a staged and committed batch of the indexer.
    sent = " ".join(name for name, n in requests.items() if n > 0)
    for kind in ("/search", "query", "batch"):
        assert kind in sent, requests
    with live_service.client() as admin:
        # The indexers unindexed what they indexed when the test stopped: the catalog holds the
        # objects the locustfile created, as before the run.
        assert admin.get(f"/catalogs/{catalog}").json()["objects"] == 1200
        admin.delete(f"/catalogs/{catalog}")
