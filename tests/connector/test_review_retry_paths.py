"""Review of the commit path: schema changes, clears and their retries against concurrent
transactions (each test failed before its fix).

1. A schema change (addColumn, addIndex, ...) sends its whole update after ZODB committed it, with
   every index declared as its transaction's snapshot had it. A Field index typed by its first
   value in another transaction (``_settle_value_types``: a write of the tool only) that committed
   after that snapshot is declared "text" again: the service replaces the index and drops its
   values, while ZODB keeps it typed "number". (Fix: every schema change writes the tool, as the
   typing does, so the two conflict in ZODB and the later one is retried.)
2. The same through ``_retry_schema``: a whole update whose sending failed is sent again from the
   next query's snapshot, which may be older than such a typing. (Fix: read in a fresh snapshot.)
3. The typing's own transaction skipped its whole update after the commit when its additions had
   been all of it; an older transaction's additions, sent in between (the index held no committed
   values yet), had declared the index "text" again, and stayed so. (Fix: always sent.)
4. A batch commit that failed after ZODB committed is retried before the next query; if a
   resolver aborted the staged batch meanwhile, the retry dropped it (logged) where tpc_finish
   applies it again. (Fix: the retry keeps the batch and applies it again on a 409.)
"""

from __future__ import annotations

import threading

import pytest
from plone import api
from ZODB.POSException import ConflictError

from plone_connector.catalog import batch as batch_module
from plone_connector.catalog.client import get_client
from tests.connector.sites import CONNECTED, delete_from, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

NUM_INDEX = "review_rt_num"
NUM_ATTR = "review_rt_number"
COLUMN = "review_rt_col"
DOC = "review-rt-doc"


def _declarations(catalog_id: str) -> dict:
    return {d.name: d for d in get_client().get_catalog(catalog_id).indexes}


def _begun_before(change_a, change_b) -> None:
    """Transaction A begins (its snapshot), then B runs and commits in full (ZODB and service),
    then A runs ``change_a`` and commits. A ConflictError of A is retried from a fresh snapshot, as
    Zope's publisher does."""
    a_began, b_done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def run_a():
        try:
            try:
                with on_site(CONNECTED) as site:
                    site.portal_catalog._catalog.indexes  # noqa: B018 - loaded in A's snapshot
                    a_began.set()
                    assert b_done.wait(60)
                    change_a(site)
            except ConflictError:
                with on_site(CONNECTED) as site:
                    change_a(site)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            a_began.set()

    thread = threading.Thread(target=run_a)
    thread.start()
    try:
        assert a_began.wait(60)
        with on_site(CONNECTED) as site:
            change_b(site)
    finally:
        b_done.set()
        thread.join(60)
    assert not errors, errors


@pytest.fixture
def number_index(plone_sites):
    """A FieldIndex not typed yet (declared "text", no values) and a document without a value."""
    with on_site(CONNECTED) as site:
        site.portal_catalog.addIndex(NUM_INDEX, "FieldIndex", extra={"indexed_attrs": NUM_ATTR})
        api.content.create(container=site, type="Document", id=DOC, title="Probe")
        catalog_id = site.portal_catalog.catalog_id()
    assert _declarations(catalog_id)[NUM_INDEX].value_type == "text"
    yield catalog_id
    batch_module._unsent_schemas.clear()
    delete_from(CONNECTED, DOC)
    with on_site(CONNECTED) as site:
        catalog = site.portal_catalog
        if NUM_INDEX in catalog.indexes():
            catalog.delIndex(NUM_INDEX)
        if COLUMN in catalog.schema():
            catalog.delColumn(COLUMN)


def test_a_schema_change_begun_before_a_first_value_keeps_its_type(number_index):
    catalog_id = number_index

    def add_column(site):
        site.portal_catalog.addColumn(COLUMN)

    def first_value(site):
        doc = site[DOC]
        setattr(doc, NUM_ATTR, 5)
        doc.reindexObject()

    _begun_before(add_column, first_value)
    with on_site(CONNECTED, commit=False) as site:
        catalog = site.portal_catalog
        assert COLUMN in catalog.schema()  # ZODB has both changes
        assert catalog._service_value_types[NUM_INDEX] == "number"
        found = [b.getId for b in catalog.unrestrictedSearchResults(**{NUM_INDEX: 5})]
    assert _declarations(catalog_id)[NUM_INDEX].value_type == "number", (
        "the schema change declared the index as its older snapshot had it, and the service replaced it")
    assert found == [DOC], "the document's value of the index was dropped"


def _fail_whole_updates(monkeypatch):
    """The service is unreachable for the whole update a transaction sends after ZODB committed
    (its additions, before the vote, went through)."""
    from plone_connector.catalog.client import CatalogClient

    real = CatalogClient.update_schema

    def update_schema(client, catalog_id, update):
        if not update.only_add:
            raise batch_module.ServiceUnavailable("the service is down", 503)
        return real(client, catalog_id, update)

    monkeypatch.setattr(CatalogClient, "update_schema", update_schema)


def test_a_schema_retry_from_an_older_snapshot_keeps_a_newer_type(number_index, monkeypatch):
    """A removal whose sending failed after its commit is sent again by the next query of the
    process (``_retry_schema``), with every index declared as that query's snapshot has it. A
    Field index typed by its first value in a transaction that committed after that snapshot is
    declared "text" again: the service replaces it and drops its values."""
    catalog_id = number_index
    with on_site(CONNECTED) as site:
        site.portal_catalog.addColumn(COLUMN)
    _fail_whole_updates(monkeypatch)
    with on_site(CONNECTED) as site:
        site.portal_catalog.delColumn(COLUMN)
    monkeypatch.undo()
    assert catalog_id in batch_module._unsent_schemas

    def query(site):
        assert catalog_id in batch_module._unsent_schemas  # nothing sent it yet
        site.portal_catalog.unrestrictedSearchResults(portal_type="Document")

    def first_value(site):
        doc = site[DOC]
        setattr(doc, NUM_ATTR, 5)
        doc.reindexObject()

    # A's snapshot has the removal's commit (the retry may go), not the typing B commits next.
    _begun_before(query, first_value)
    with on_site(CONNECTED, commit=False) as site:
        catalog = site.portal_catalog
        assert catalog._service_value_types[NUM_INDEX] == "number"
        catalog.unrestrictedSearchResults(portal_type="Document")  # a retry left for later goes now
        found = [b.getId for b in catalog.unrestrictedSearchResults(**{NUM_INDEX: 5})]
    assert batch_module._unsent_schemas == {}
    assert COLUMN not in get_client().get_catalog(catalog_id).metadata  # the removal was sent
    assert _declarations(catalog_id)[NUM_INDEX].value_type == "number", (
        "the retried schema update declared the index as an older snapshot had it")
    assert found == [DOC], "the document's value of the index was dropped"


def test_a_first_value_keeps_its_type_over_an_older_transactions_additions(number_index):
    """B gives the index its first value (the additions it sends before the vote type it
    "number"; its batch is staged). A, whose snapshot has the index untyped, adds a column and
    indexes a new document and queries before B commits: its additions declare the index "text" again, which the service
    allows (no committed values yet), and A then aborts. B committed: ZODB has the index typed
    "number", and the service must too (B skipped its whole update, the additions having been all
    of it as far as B knew)."""
    catalog_id = number_index
    b_staged, a_done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def run_a():
        try:
            assert b_staged.wait(60)
            with on_site(CONNECTED, commit=False) as site:
                site.portal_catalog.addColumn(COLUMN)
                api.content.create(container=site, type="Document", id="review-rt-other", title="Other")
                site.portal_catalog.unrestrictedSearchResults(portal_type="Document")  # sends its additions
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            a_done.set()

    thread = threading.Thread(target=run_a)
    thread.start()
    try:
        with on_site(CONNECTED) as site:
            doc = site[DOC]
            setattr(doc, NUM_ATTR, 5)
            doc.reindexObject()
            site.portal_catalog.unrestrictedSearchResults(portal_type="Document")  # stages B's batch
            assert _declarations(catalog_id)[NUM_INDEX].value_type == "number"
            b_staged.set()
            assert a_done.wait(60)
    finally:
        b_staged.set()
        thread.join(60)
    assert not errors, errors
    with on_site(CONNECTED, commit=False) as site:
        catalog = site.portal_catalog
        assert catalog._service_value_types[NUM_INDEX] == "number"
        found = [b.getId for b in catalog.unrestrictedSearchResults(**{NUM_INDEX: 5})]
    assert _declarations(catalog_id)[NUM_INDEX].value_type == "number", (
        "the service kept the older transaction's declaration of the index")
    assert found == [DOC]


def test_a_commit_retried_after_a_resolver_aborted_the_batch_applies_it_again(number_index, monkeypatch):
    """The service is unreachable when a transaction's batch is committed after ZODB committed it
    (kept for a retry before the next query), and meanwhile a resolver aborts the staged batch
    (its transaction voted later than the resolve delay after its staging, as in
    test_late_commit.py, or the service's own resolver gave it up). tpc_finish applies an aborted
    batch again (``_apply_again``); the retry must too, not drop the committed transaction's
    entries with an error in the log."""
    from plone_connector.catalog.client import CatalogClient

    real_commit = CatalogClient.commit_batch
    failed = []

    def unreachable(client, catalog_id, batch_id):
        if not failed:
            failed.append(batch_id)
            client.abort_batch(catalog_id, batch_id)  # a resolver, while the service was away from us
            raise batch_module.ServiceUnavailable("the service is unreachable", None)
        return real_commit(client, catalog_id, batch_id)

    monkeypatch.setattr(CatalogClient, "commit_batch", unreachable)
    with on_site(CONNECTED) as site:
        site[DOC].setTitle("Probe, edited after the outage")
        site[DOC].reindexObject()
    monkeypatch.undo()
    assert failed and (number_index, failed[0]) in batch_module._unfinished
    with on_site(CONNECTED, commit=False) as site:
        brains = site.portal_catalog.unrestrictedSearchResults(path={"query": f"/{CONNECTED}/{DOC}", "depth": 0})
        titles = [b.Title for b in brains]
    assert not batch_module._unfinished
    assert titles == ["Probe, edited after the outage"], "the committed transaction's entries were dropped"
