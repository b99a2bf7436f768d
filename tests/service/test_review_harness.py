"""Review: the test harness's live service (tests/live.py).

Regression test for a bug found in review (fixed: the service's log now goes to a file).
"""

from __future__ import annotations

import httpx

from tests.live import start_service
from tests.service.test_review_support import new_catalog


def test_live_service_survives_its_own_error_logs(database_url):
    service = start_service(database_url)  # as the session's live_service fixture starts it
    try:
        with service.client() as admin:
            name, _ = new_catalog(admin)
        for _ in range(12):
            # Any request answered with 500 logs a traceback; a path level beyond int32 is one.
            try:
                httpx.post(f"{service.url}/search?catalog={name}", timeout=5,
                           json={"query": {"path": {"query": "/plone", "level": 10**10}}})
            except httpx.TimeoutException:
                break
        assert httpx.get(service.url + "/healthz", timeout=5).status_code == 200
    finally:
        service.stop()
