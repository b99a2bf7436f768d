"""Rebuilds of sites larger than one batch request (docs/decisions/0018).

The connector's site is rebuilt against a second service process on the same database whose
CATALOG_MAX_BATCH_ENTRIES is lower than the site's number of objects, so one staging of the whole
site is refused (as a site of more than 100,000 objects was by a stock service), and whose
CATALOG_BULK_COMMIT_ENTRIES is lower too (the commit drops and builds the indexes again). The
connector sends its rebuild ahead in chunks of a few entries: every request stays within the
limit, the pending batch never holds more than a chunk, Zope's progress handler and the log get
the progress, and the rebuilt catalog answers as stock ZCatalog's rebuilt catalog does.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import pytest
import transaction
from plone import api

from plone_connector.catalog import batch as batch_module
from plone_connector.catalog.client import CatalogClient, get_client, reset_client
from plone_connector.catalog.errors import StreamedBatchRollback
from plone_connector.catalog.settings import ConnectorSettings
from plone_connector.catalog.verify import verify
from tests.connector.service import ServiceProcess
from tests.connector.sites import CONNECTED, SITES, STOCK, delete_from, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

ROOT = "chunked"
DOCUMENTS = 24
MAX_REQUEST = 8  # the second service's CATALOG_MAX_BATCH_ENTRIES
CHUNK = 5


@pytest.fixture(scope="module")
def content(plone_sites):
    for name in SITES:
        with on_site(name) as site:
            root = api.content.create(container=site, type="Folder", id=ROOT, title="Chunked")
            for n in range(DOCUMENTS):
                api.content.create(container=root, type="Document", id=f"doc-{n}", title=f"Chunked document {n}",
                                   subject=[f"chunk-{n % 3}"])
    yield
    for name in SITES:
        delete_from(name, ROOT)


@pytest.fixture
def small_requests(content, catalog_service, database_url):
    """The connector talks to a service that takes at most MAX_REQUEST entries a request, and
    sends its batches ahead in chunks of CHUNK entries."""
    service = ServiceProcess(database_url)
    service.admin_token = catalog_service.admin_token
    env = os.environ
    saved = {k: env.get(k) for k in ("CATALOG_MAX_BATCH_ENTRIES", "CATALOG_BULK_COMMIT_ENTRIES")}
    env["CATALOG_MAX_BATCH_ENTRIES"] = str(MAX_REQUEST)
    env["CATALOG_BULK_COMMIT_ENTRIES"] = "10"
    try:
        service.start()
    finally:
        for key, value in saved.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
    settings = dataclasses.replace(ConnectorSettings.from_environ(), url=service.url, chunk_entries=CHUNK)
    reset_client(CatalogClient(settings))
    try:
        yield get_client()
    finally:
        reset_client()
        service.stop()


class RecordingHandler:
    """A progress handler (Products.ZCatalog.ProgressHandler's protocol) that records its calls."""

    def __init__(self):
        self.calls = []

    def init(self, ident, max):
        self.calls.append(("init", ident, max))

    def report(self, current, *args, **kw):
        self.calls.append(("report", current))

    def info(self, text):
        self.calls.append(("info", text))

    def finish(self):
        self.calls.append(("finish",))


@pytest.fixture
def requests_sent(monkeypatch):
    """The number of entries of every staging and append, and the most entries a pending batch
    held at once."""
    sent = {"stage": [], "append": [], "held": 0, "partial": 0}
    real_stage, real_append = CatalogClient.stage_batch, CatalogClient.append_batch
    real_index = batch_module.PendingBatch.index

    def partial(entries) -> int:
        return sum(1 for e in entries if getattr(e, "idxs", None) is not None)

    def stage(client, catalog_id, batch):
        sent["stage"].append(len(batch.entries))
        sent["partial"] += partial(batch.entries)
        return real_stage(client, catalog_id, batch)

    def append(client, catalog_id, batch_id, body):
        sent["append"].append(len(body.entries))
        sent["partial"] += partial(body.entries)
        return real_append(client, catalog_id, batch_id, body)

    def index(self, *args, **kw):
        real_index(self, *args, **kw)
        sent["held"] = max(sent["held"], len(self.entries))

    monkeypatch.setattr(CatalogClient, "stage_batch", stage)
    monkeypatch.setattr(CatalogClient, "append_batch", append)
    monkeypatch.setattr(batch_module.PendingBatch, "index", index)
    return sent


def _answers(name: str) -> list:
    with on_site(name, commit=False) as site:
        base = "/".join(site.getPhysicalPath())
        found = site.portal_catalog.unrestrictedSearchResults(path=base, sort_on="path")
        return sorted((b.getPath()[len(base):], b.Title, tuple(b.Subject or ())) for b in found)


@pytest.mark.parametrize("rebuild", ["clearFindAndRebuild", "refreshCatalog"])
def test_a_site_larger_than_a_request_rebuilds_in_chunks(small_requests, requests_sent, caplog, monkeypatch,
                                                          rebuild):
    monkeypatch.setattr("plone_connector.catalog.verify.VERIFY_CHUNK", CHUNK)  # (the service's limit)
    handler = RecordingHandler()
    with on_site(CONNECTED) as site:
        objects = len(site.portal_catalog)
        assert objects > 3 * MAX_REQUEST
        with caplog.at_level(logging.INFO, logger="plone_connector.catalog"):
            if rebuild == "clearFindAndRebuild":
                site.portal_catalog.clearFindAndRebuild(pghandler=handler)
            else:
                site.portal_catalog.refreshCatalog(clear=1, pghandler=handler)
            # Seen by the rebuilding transaction itself before its commit, as ZCatalog's would be.
            assert len(site.portal_catalog.unrestrictedSearchResults(path=f"/{CONNECTED}/{ROOT}")) == DOCUMENTS + 1
    with on_site(STOCK) as site:
        getattr(site.portal_catalog, rebuild)(*([1] if rebuild == "refreshCatalog" else []))

    sizes = requests_sent["stage"] + requests_sent["append"]
    assert sum(sizes) >= objects and max(sizes) <= CHUNK
    assert requests_sent["held"] <= CHUNK
    # Plone's clearFindAndRebuild names every index (idxs) and the metadata: whole entries, which
    # the service commits without merging them into rows (store/batches.py).
    assert requests_sent["partial"] == 0
    # Zope's progress handler: init with the estimate, a report per object, finish.
    assert handler.calls[0][0] == "init" and handler.calls[0][2] == objects
    reports = [c[1] for c in handler.calls if c[0] == "report"]
    assert reports == list(range(1, len(reports) + 1)) and len(reports) >= objects - 1
    assert handler.calls[-1] == ("finish",)
    lines = [r.getMessage() for r in caplog.records if rebuild in r.getMessage()]
    assert any("objects/s" in line and f"{len(reports)} objects in" in line for line in lines), lines

    assert _answers(CONNECTED) == _answers(STOCK)
    with on_site(CONNECTED) as site:
        report = verify(site)
        assert report.clean, report.as_dict()


def test_an_interrupted_rebuild_leaves_nothing_and_runs_again(small_requests, requests_sent):
    before = _answers(CONNECTED)
    client = small_requests
    with on_site(CONNECTED, commit=False) as site:
        catalog_id = site.portal_catalog.catalog_id()
    staged_before = set(client.staged_batches(catalog_id, older_than=0))
    with pytest.raises(RuntimeError), on_site(CONNECTED) as site:
        site.portal_catalog.clearFindAndRebuild()
        assert requests_sent["append"]  # chunks went ahead
        raise RuntimeError("interrupted before the commit")
    # Aborted with its transaction: nothing of it is staged, the catalog is as before.
    assert set(client.staged_batches(catalog_id, older_than=0)) == staged_before
    assert _answers(CONNECTED) == before
    with on_site(CONNECTED) as site:
        site.portal_catalog.clearFindAndRebuild()
    assert _answers(CONNECTED) == before


def test_a_savepoint_rollback_past_a_chunk_sent_ahead_fails_the_transaction(small_requests):
    before = _answers(CONNECTED)
    with on_site(CONNECTED, commit=False) as site:
        site.portal_catalog.catalog_object(site[ROOT])  # the batch joins the transaction first
        savepoint = transaction.savepoint()
        site.portal_catalog.clearFindAndRebuild()
        with pytest.raises(StreamedBatchRollback):
            savepoint.rollback()
        with pytest.raises(Exception, match="(?i)commit"):
            transaction.commit()
    assert _answers(CONNECTED) == before


def test_verify_compares_a_site_in_chunks_and_repairs_it(small_requests, monkeypatch):
    """verify sends the site in chunks no larger than the connector's chunk_entries (the service
    here refuses more than MAX_REQUEST entries a request; verify sent 500 before), holds no more
    than a chunk of entries, and still finds every kind of drift across chunks and repairs it."""
    sizes = []
    real_verify = CatalogClient.verify

    def recording(client, catalog_id, entries):
        sizes.append(len(entries))
        return real_verify(client, catalog_id, entries)

    monkeypatch.setattr(CatalogClient, "verify", recording)
    folder = f"/{CONNECTED}/{ROOT}"
    with on_site(CONNECTED) as site:
        tool = site.portal_catalog
        tool.uncatalog_object(f"{folder}/doc-3")  # missing
        tool.catalog_object(site[ROOT]["doc-4"], f"{folder}/no-such-object")  # phantom
        site[ROOT]["doc-17"].title = "Changed without a reindex"  # stale
    try:
        with on_site(CONNECTED) as site:
            report = verify(site)
        assert len(sizes) > 1 and max(sizes) <= CHUNK, sizes
        assert report.missing == [f"{folder}/doc-3"]
        assert report.phantom == [f"{folder}/no-such-object"]
        assert set(report.stale) == {f"{folder}/doc-17"} and "Title" in report.stale[f"{folder}/doc-17"]
        with on_site(CONNECTED) as site:
            verify(site, repair=True)
        with on_site(CONNECTED) as site:
            assert verify(site).clean
            assert [b.Title for b in site.portal_catalog(path=f"{folder}/doc-17")] == ["Changed without a reindex"]
    finally:
        with on_site(CONNECTED) as site:
            site[ROOT]["doc-17"].title = "Chunked document 17"
            site[ROOT]["doc-17"].reindexObject()
    assert _answers(CONNECTED) == _answers(STOCK)
