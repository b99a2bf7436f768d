"""Service requests and query cache hits per page render, as the stats view and the log report them."""

from __future__ import annotations

import json
import logging

import pytest
from DateTime import DateTime
from plone.testing import zope

from plone_connector.catalog import stats
from plone_connector.catalog.cache import query_cache
from plone_connector.catalog.tool import minute
from tests.connector.sites import CONNECTED, PASSWORD

pytestmark = [pytest.mark.slow, pytest.mark.plone]


def browser(app, user=None):
    b = zope.Browser(app)
    b.handleErrors = False
    if user:
        b.addHeader("Authorization", f"Basic {user}:{PASSWORD}")
    return b


def test_renders_count_service_requests_and_cache_hits(plone_sites, monkeypatch, caplog):
    stats.reset()
    monkeypatch.setattr(stats, "LOG_INTERVAL", 0.0)
    with zope.zopeApp() as app:
        anonymous = browser(app)
        # Queries carry `now` floored to the minute (effectiveRange), so two renders across a
        # minute boundary rightly share no cache entry: render the pair again in that case.
        for _attempt in range(3):
            stats.reset()
            query_cache.clear()  # the first render asks the service (an earlier attempt filled it)
            started = minute(DateTime())
            with caplog.at_level(logging.INFO, logger="plone_connector.catalog"):
                anonymous.open(f"http://nohost/{CONNECTED}")
                first = stats.totals.as_dict()
                anonymous.open(f"http://nohost/{CONNECTED}")
            second = stats.totals.as_dict()
            if minute(DateTime()) == started:
                break
        # The site root's navigation queries the catalog; the same page again is served from the
        # cache (nothing committed in between), so it sends fewer requests, and hits.
        assert first["renders"] == 1 and first["service_requests"] > 0
        assert second["renders"] == 2
        assert second["cache_hits"] > first["cache_hits"]
        assert second["service_requests"] - first["service_requests"] < first["service_requests"]
        assert any("query cache hit rate" in r.getMessage() for r in caplog.records)
        manager = browser(app, "manager")
        manager.open(f"http://nohost/{CONNECTED}/@@catalog-service-stats")
        report = json.loads(manager.contents)
    assert report["page_renders"]["renders"] >= 2  # this render itself ends after the report
    assert report["page_renders"]["service_requests_per_render"] > 0
    assert 0 < report["page_renders"]["cache_hit_rate"] < 1
    assert report["cache"]["hits"] >= second["cache_hits"]
