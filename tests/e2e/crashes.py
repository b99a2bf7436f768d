"""What the tests of a Plone process killed in the middle of a commit share, on JsonbStorage
(test_crash_on_jsonb.py) and on FileStorage (test_crash_on_filestorage.py): a second service
that resolves batches early, and the drift that ``verify`` finds on the connector site.

``db``: the connector site's database, if not the current layer's.
"""

from __future__ import annotations

import contextlib
import os
from unittest import mock

from plone_connector.catalog.verify import verify
from tests.connector.service import ServiceProcess
from tests.connector.sites import CONNECTED, on_site


@contextlib.contextmanager
def eager_service_resolver(dsn: str):
    """A second service on the same database whose own resolver expires batches after 2 s."""
    with mock.patch.dict(os.environ, {"CATALOG_STAGED_BATCH_TTL": "2"}):
        service = ServiceProcess(dsn)
        service.start()
    try:
        yield
    finally:
        service.stop()


def unrestricted_paths(obj_id: str, db=None) -> list[str]:
    with on_site(CONNECTED, commit=False, db=db) as site:
        return [b.getPath() for b in site.portal_catalog.unrestrictedSearchResults(id=obj_id)]


def drift(db=None) -> dict:
    with on_site(CONNECTED, commit=False, db=db) as site:
        report = verify(site).as_dict()
    assert report["checked"] >= 1
    return {key: report[key] for key in ("missing", "phantom", "stale")}


def assert_no_new_drift(baseline: dict, db=None) -> None:
    after = drift(db)
    assert after["missing"] == [] and after["phantom"] == [], after
    # Adding to the site reindexes its root, which may clear the root's initial drift.
    assert set(after["stale"]) <= set(baseline["stale"]), after
