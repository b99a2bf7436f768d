"""The catalog counter and the batch it stands for: another ZODB connection that sees a
transaction's new counter before the service committed its batch must neither cache the older
answer under the new counter nor (if the commit follows within about a second) miss the change."""

from __future__ import annotations

import threading

import pytest
import transaction
from plone import api
from ZODB import DB
from ZODB.FileStorage import FileStorage

from plone_connector.catalog import committed
from plone_connector.catalog.cache import query_cache
from plone_connector.catalog.client import CatalogClient
from plone_connector.catalog.committed import CatalogBatchMark, batch_watch
from plone_connector.catalog.verify import verify
from tests.connector.sites import CONNECTED, delete_from, on_site
from tests.connector.sites import catalog_paths as paths


@pytest.fixture
def remove_created(plone_sites):
    """Other test modules compare this site with the stock one: leave no extra content behind."""
    yield
    delete_from(CONNECTED, "race-cached", "race-waited")


class HeldCommits:
    """Holds the service commit of batches (after ZODB committed) until released."""

    def __init__(self, monkeypatch):
        self.real_commit = CatalogClient.commit_batch
        self.holding = threading.Event()
        self.release = threading.Event()
        held = self

        def commit(client, catalog_id, batch_id):
            held.holding.set()
            assert held.release.wait(30)
            return held.real_commit(client, catalog_id, batch_id)

        monkeypatch.setattr(CatalogClient, "commit_batch", commit)


def create_in_thread(doc_id: str) -> threading.Thread:
    def write():
        with on_site(CONNECTED) as site:
            api.content.create(container=site, type="Document", id=doc_id, title=doc_id)

    thread = threading.Thread(target=write)
    thread.start()
    return thread


@pytest.mark.slow
@pytest.mark.plone
def test_answer_before_the_service_commit_is_not_cached(remove_created, monkeypatch):
    monkeypatch.setattr(committed, "WAIT_STEPS", (0.01, 0.01))
    held = HeldCommits(monkeypatch)
    incomplete = batch_watch.incomplete_answers
    writer = create_in_thread("race-cached")
    try:
        assert held.holding.wait(30)
        with on_site(CONNECTED, commit=False) as site:
            # This connection's snapshot has the new object and the new counter ...
            assert "race-cached" in site
            counter = site.portal_catalog.getCounter()
            # ... but the service has not committed the batch: the older answer, after a wait.
            assert paths(site, id="race-cached") == []
            # Given up on once, the batch is not waited for by every later query.
            waits = batch_watch.waits
            assert paths(site, id="race-cached") == []
            assert batch_watch.waits == waits
        assert batch_watch.incomplete_answers == incomplete + 2
    finally:
        held.release.set()
        writer.join(30)
    with on_site(CONNECTED, commit=False) as site:
        assert site.portal_catalog.getCounter() == counter  # the same cache key as above
        assert paths(site, id="race-cached") == ["/conn/race-cached"]


@pytest.mark.slow
@pytest.mark.plone
def test_read_your_writes_across_connections_waits_for_the_commit(remove_created, monkeypatch):
    held = HeldCommits(monkeypatch)
    writer = create_in_thread("race-waited")
    try:
        assert held.holding.wait(30)
        timer = threading.Timer(0.15, held.release.set)
        timer.start()
        with on_site(CONNECTED, commit=False) as site:
            assert paths(site, id="race-waited") == ["/conn/race-waited"]
            hits = query_cache.hits
            assert paths(site, id="race-waited") == ["/conn/race-waited"]
            assert query_cache.hits == hits + 1  # the complete answer was cached
    finally:
        held.release.set()
        writer.join(30)
    assert batch_watch.waits > 0


@pytest.mark.slow
@pytest.mark.plone
def test_staged_changes_rolled_back_to_an_empty_batch_never_commit(plone_sites):
    with on_site(CONNECTED) as site:
        savepoint = transaction.savepoint()
        api.content.create(container=site, type="Document", id="staged-then-gone", title="Gone")
        # The query stages the batch in the service ...
        assert paths(site, id="staged-then-gone") == ["/conn/staged-then-gone"]
        # ... and the rollback discards it: the staged copy must never be committed.
        savepoint.rollback()
    with on_site(CONNECTED) as site:
        assert "staged-then-gone" not in site
        assert paths(site, id="staged-then-gone") == []
        assert verify(site).clean


def test_concurrent_marks_merge_so_readers_wait_for_both(tmp_path):
    """Two ZODB connections bump the counter at once: the merged mark names both batches."""
    from BTrees.Length import Length
    from persistent.mapping import PersistentMapping

    db = DB(FileStorage(str(tmp_path / "Data.fs")))
    try:
        setup = transaction.TransactionManager()
        root = db.open(transaction_manager=setup).root()
        root["tool"] = PersistentMapping(counter=Length(), mark=CatalogBatchMark())
        root["tool"]["mark"].record("b0")
        setup.commit()
        first, second = transaction.TransactionManager(), transaction.TransactionManager()
        tools = [db.open(transaction_manager=tm).root()["tool"] for tm in (first, second)]
        for tool, batch_id in zip(tools, ("b1", "b2"), strict=True):
            tool["counter"].change(1)
            tool["mark"].record(batch_id)
        first.commit()
        second.commit()  # resolved, not a ConflictError
        reader = transaction.TransactionManager()
        tool = db.open(transaction_manager=reader).root()["tool"]
        assert tool["counter"]() == 2
        assert tool["mark"].ids == ("b1", "b2")
        # The next writer names only its own batch again.
        tool["mark"].record("b3")
        reader.commit()
        assert tool["mark"].ids == ("b3",)
    finally:
        db.close()
