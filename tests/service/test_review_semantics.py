"""Review: where the service departs from ZCatalog (the oracle) without saying so in
docs/decisions/0003-query-semantics.md, and index-time work that is not bounded.

Each test shows a bug found in review and is marked xfail(strict=True) until it is fixed.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest

from catalog_schemas.api import IndexDeclaration
from tests.service.oracle import CatalogObject, OracleError, ZCatalogOracle
from tests.service.test_api import NOW, entry
from tests.service.test_review_support import commit_batch, drained_service, new_catalog, post

D = IndexDeclaration


@pytest.fixture(scope="module")
def service(database_url):
    with drained_service(database_url) as service:
        yield service


@pytest.fixture(scope="module")
def name(service):
    with service.client() as admin:
        name, _ = new_catalog(admin)
    commit_batch(service, name, [entry("a", "/plone/a", effective=NOW - timedelta(days=1), subjects=["x"])])
    return name


@pytest.fixture(scope="module")
def oracle():
    oracle = ZCatalogOracle([D(name="portal_type", type="FieldIndex"), D(name="Subject", type="KeywordIndex")])
    oracle.index(CatalogObject("a", "/plone/a", {"portal_type": "Document", "Subject": ["x"]}))
    return oracle


@pytest.mark.xfail(strict=True, reason="ZCatalog raises for these (Catalog.make_query sorts every bare list, "
                   "which fails on mixed types; UnIndex calls range.find on a non-string range), the service "
                   "answers 200 with results; 0003 promises a 400 where ZCatalog raises")
@pytest.mark.parametrize("query", [
    {"portal_type": ["Document", None]},
    {"Subject": ["x", 1]},
    {"portal_type": {"query": "Document", "range": 5}},
], ids=["none-in-bare-list", "mixed-bare-list", "non-string-range"])
def test_queries_zcatalog_refuses_are_4xx(service, name, oracle, query):
    with pytest.raises(OracleError):
        oracle.search(query)
    response = post(service, f"/search?catalog={name}", json={"query": query})
    assert 400 <= response.status_code < 500, response.text


@pytest.mark.xfail(strict=True, reason="an RRULE that can never match (30 February) at a fine frequency "
                   "makes dateutil walk every minute to year 9999: ~14 s of CPU per entry, run "
                   "synchronously in the batch handler, so the whole service stops answering meanwhile")
def test_impossible_recurrence_is_bounded_in_time():
    # In a child process, so that the expansion can be stopped when it overruns.
    code = ("from catalog_service.indexes.recurrence import occurrences\n"
            "try:\n"
            "    occurrences('2020-01-01T10:00:00+00:00', 'RRULE:FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=30')\n"
            "except Exception:\n"
            "    pass  # a named refusal is a fix too\n")
    try:
        subprocess.run([sys.executable, "-c", code], timeout=3, check=True)
    except subprocess.TimeoutExpired:
        pytest.fail("expanding one impossible rule still ran after 3 s")
