"""Two Plone processes adding to the same folder at once, on JsonbStorage with the connector.

Two forked children each add documents to one folder, one transaction per document, retrying on
conflicts as Zope's publisher does. They write the same folder (its BTree, its order, its
modification time) and the same catalog tool: the storage must resolve or report each conflict,
its invalidations must reach the other process, and every committed document must be in the
catalog once, in its folder position, with nothing of the retried attempts.
"""

from __future__ import annotations

import os

import pytest
import transaction
from plone import api

from plone_connector.catalog.verify import verify
from tests.connector.sites import CONNECTED, on_site
from tests.e2e import forking

pytestmark = [pytest.mark.slow, pytest.mark.plone]

FOLDER = "busy"
PER_PROCESS = 12


@pytest.fixture
def busy_folder(plone_sites):
    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Folder", id=FOLDER, title="Busy")
    yield f"/{CONNECTED}/{FOLDER}"
    with on_site(CONNECTED) as site:
        api.content.delete(obj=site[FOLDER])


def writer(dsn: str, name: str):
    def child(report_fd: int) -> None:
        db = forking.own_connections(dsn)
        tries = 0
        for number in range(PER_PROCESS):
            for attempt in transaction.manager.attempts(20):
                with attempt, forking.site_as_manager(db, CONNECTED) as site:
                    tries += 1
                    api.content.create(container=site[FOLDER], type="Document", id=f"{name}-{number}",
                                       title=f"{name} document {number}")
                    transaction.commit()
        os.write(report_fd, str(tries - PER_PROCESS).encode())

    return child


def test_two_processes_adding_to_one_folder(busy_folder, database_url, record_property):
    children = [forking.start(writer(database_url, name)) for name in ("left", "right")]
    results = [forking.finish(pid, fd) for pid, fd in children]
    assert [os.waitstatus_to_exitcode(status) for status, _ in results] == [0, 0], results
    record_property("conflict retries", sum(int(report) for _, report in results))

    expected = {f"{name}-{n}" for name in ("left", "right") for n in range(PER_PROCESS)}
    with on_site(CONNECTED, commit=False) as site:
        folder = site[FOLDER]
        assert set(folder.objectIds()) == expected
        brains = site.portal_catalog.unrestrictedSearchResults(
            path={"query": busy_folder, "depth": 1}, sort_on="getObjPositionInParent")
        # Once each, in the folder's own order.
        assert [b.getId for b in brains] == list(folder.objectIds())
        report = verify(site)
        assert not report.missing and not report.phantom, report.as_dict()
        assert not [path for path in report.stale if path.startswith(busy_folder)], report.as_dict()
