"""Identical queries within one transaction that has pending catalog changes are sent once.

The process-wide query cache cannot serve those (its answers would include one transaction's staged
batch), so the tool keeps them in a memo of the transaction, keyed on the staged batch and how often
it changed since.
"""

from __future__ import annotations

import json

import pytest
import transaction
from plone import api
from plone.app.testing import logout
from plone.testing import zope

from plone_connector.catalog import stats
from plone_connector.catalog.cache import MEMO_SIZE, TransactionMemo, memo_stats, transaction_memo
from plone_connector.catalog.client import get_client
from plone_connector.catalog.committed import batch_watch
from tests.connector.sites import CONNECTED, PASSWORD, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

BASE = f"/{CONNECTED}/memo"


def rows(brains) -> tuple:
    """Everything a result says, so a memo answer and a service answer must agree in full."""
    return (
        len(brains),
        brains.actual_result_count,
        [(b.getPath(), b.getRID(), b.Title, b.portal_type, b.review_state, b.modified, tuple(b.Subject or ()))
         for b in brains],
    )


def queries(catalog):
    return [
        lambda: catalog(path=BASE, sort_on="sortable_title"),
        lambda: catalog(portal_type="Document", path=BASE, sort_on="sortable_title", sort_order="reverse"),
        lambda: catalog(SearchableText="memo", path=BASE),
        lambda: catalog(path=BASE, sort_on="sortable_title", b_start=1, b_size=2),
        lambda: catalog(path=BASE, sort_on="sortable_title", sort_limit=2),
        lambda: catalog.unrestrictedSearchResults(path={"query": BASE, "depth": 1}, sort_on="id"),
    ]


def test_identical_queries_with_pending_changes_are_sent_once(plone_sites):
    client = get_client()
    incomplete = batch_watch.incomplete_answers
    with on_site(CONNECTED) as site:
        folder = api.content.create(container=site, type="Folder", id="memo", title="Memo")
        api.content.create(container=folder, type="Document", id="a", title="Alpha memo", subject=("x",))
        catalog = site.portal_catalog
        first = rows(catalog(path=BASE, sort_on="sortable_title"))
        assert sorted(row[0] for row in first[2]) == [BASE, f"{BASE}/a"]
        sent = client.requests_sent
        assert rows(catalog(path=BASE, sort_on="sortable_title")) == first
        assert client.requests_sent == sent  # answered by the memo

        # A change in between: the batch is staged again and the query sent again, and sees it.
        api.content.create(container=folder, type="Document", id="b", title="Beta memo")
        sent = client.requests_sent
        after = rows(catalog(path=BASE, sort_on="sortable_title"))
        assert client.requests_sent - sent == 2  # the staging of the changed batch, the query
        assert sorted(row[0] for row in after[2]) == [BASE, f"{BASE}/a", f"{BASE}/b"]
        sent = client.requests_sent
        assert rows(catalog(path=BASE, sort_on="sortable_title")) == after
        assert client.requests_sent == sent

        # Another user's principals are part of the key: anonymous sees no private content.
        logout()
        assert rows(catalog(path=BASE, sort_on="sortable_title"))[0] == 0
        assert client.requests_sent == sent + 1
        transaction.abort()
    # The transaction's own batch, named in its queries, is never waited for as a batch committed
    # elsewhere would be (that took a second per query and left every answer "incomplete").
    assert batch_watch.incomplete_answers == incomplete


def test_memo_answers_equal_the_service_answers(plone_sites):
    client = get_client()
    with on_site(CONNECTED) as site:
        folder = api.content.create(container=site, type="Folder", id="memo", title="Memo")
        for i, title in enumerate(("Gamma memo", "Alpha memo", "Beta memo", "Delta memo")):
            api.content.create(container=folder, type="Document", id=f"d{i}", title=title, subject=(title[0],))
        catalog = site.portal_catalog
        catalog(path=BASE)  # stages the batch
        asked = queries(catalog)
        served = [rows(ask()) for ask in asked]
        sent = client.requests_sent
        again = [rows(ask()) for ask in asked]
        assert client.requests_sent == sent
        # The uncached path: a new memo generation sends every query to the service again.
        transaction_memo().changed()
        direct = [rows(ask()) for ask in asked]
        assert client.requests_sent - sent == len(asked)
        assert again == served == direct
        transaction.abort()


def test_a_savepoint_rollback_in_between_is_not_answered_from_the_memo(plone_sites):
    with on_site(CONNECTED) as site:
        folder = api.content.create(container=site, type="Folder", id="memo", title="Memo")
        catalog = site.portal_catalog
        # The batch manager joins before the savepoint, so the rollback restores its batch (a
        # manager joined later is simply discarded, with its batch id).
        assert [b.getId for b in catalog(path=BASE, sort_on="id")] == ["memo"]
        savepoint = transaction.savepoint()
        api.content.create(container=folder, type="Document", id="gone", title="Rolled back")
        assert [b.getId for b in catalog(path=BASE, sort_on="id")] == ["gone", "memo"]
        savepoint.rollback()
        assert [b.getId for b in catalog(path=BASE, sort_on="id")] == ["memo"]
        transaction.abort()


def test_unique_values_with_pending_changes_are_asked_once(plone_sites):
    client = get_client()
    with on_site(CONNECTED) as site:
        folder = api.content.create(container=site, type="Folder", id="memo", title="Memo")
        api.content.create(container=folder, type="Document", id="a", title="A", subject=("memo-only",))
        catalog = site.portal_catalog
        assert "memo-only" in catalog.uniqueValuesFor("Subject")
        sent = client.requests_sent
        assert "memo-only" in catalog.uniqueValuesFor("Subject")
        assert client.requests_sent == sent
        folder["a"].setSubject(("memo-changed",))
        folder["a"].reindexObject()
        values = catalog.uniqueValuesFor("Subject")
        assert "memo-changed" in values and "memo-only" not in values
        transaction.abort()


def test_memo_hits_are_reported_in_the_stats(plone_sites):
    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Folder", id="memo", title="Memo")
        catalog = site.portal_catalog
        before = memo_stats()
        # One render: the query, the same again twice, then another query.
        stats.render_started()
        for _ in range(3):
            catalog(path=BASE)
        catalog(path=BASE, portal_type="Folder")
        counts = stats.render_ended()
        now = memo_stats()
        transaction.abort()
    assert counts["memo_hits"] == 2 and counts["memo_misses"] == 2
    assert now["hits"] - before["hits"] == 2
    assert now["misses"] - before["misses"] == 2
    assert stats.totals.as_dict()["memo_hits"] >= 2
    with zope.zopeApp() as app:
        manager = zope.Browser(app)
        manager.handleErrors = False
        manager.addHeader("Authorization", f"Basic manager:{PASSWORD}")
        manager.open(f"http://nohost/{CONNECTED}/@@catalog-service-stats")
        report = json.loads(manager.contents)
    assert report["transaction_memo"]["hits"] >= now["hits"]
    assert 0 < report["transaction_memo"]["hit_rate"] < 1
    assert "memo_hit_rate" in report["page_renders"]


def test_a_long_transaction_keeps_a_bounded_memo():
    memo = TransactionMemo()
    for i in range(MEMO_SIZE + 10):
        memo.put(("query", i), ("answer", i))
    assert memo.get(("query", 9)) is None  # the oldest went first
    assert memo.get(("query", 10)) == ("answer", 10)
    assert memo.get(("query", MEMO_SIZE + 9)) == ("answer", MEMO_SIZE + 9)
    memo.changed()
    assert memo.get(("query", MEMO_SIZE + 9)) is None
