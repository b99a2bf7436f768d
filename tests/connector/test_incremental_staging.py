"""A transaction's queries see its own changes: the first stages its batch whole, later ones append
what changed since. Where an append cannot say what changed (a savepoint rollback that removed
entries, a clear), the batch is staged whole again, and every query sees exactly the
transaction's state."""

from __future__ import annotations

import pytest
import transaction
from plone import api

from plone_connector.catalog.client import get_client
from tests.connector.sites import CONNECTED, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

BASE = f"/{CONNECTED}/staging"


class Stagings:
    """The stagings the process's client sends: (whole or append, the uids' count, clear)."""

    def __init__(self, client, monkeypatch):
        self.sent: list[tuple[str, int, bool]] = []
        stage, append = client.stage_batch, client.append_batch

        def staged(catalog_id, batch):
            self.sent.append(("whole", len(batch.entries), batch.clear))
            return stage(catalog_id, batch)

        def appended(catalog_id, batch_id, body):
            self.sent.append(("append", len(body.entries), False))
            return append(catalog_id, batch_id, body)

        monkeypatch.setattr(client, "stage_batch", staged)
        monkeypatch.setattr(client, "append_batch", appended)

    def take(self) -> list[tuple[str, int, bool]]:
        sent, self.sent = self.sent, []
        return sent


def titles(site) -> dict[str, str]:
    return {b.getId: b.Title for b in site.portal_catalog.unrestrictedSearchResults(path=BASE)}


def test_queries_append_changes_and_stage_whole_when_entries_went(plone_sites, monkeypatch):
    log = Stagings(get_client(), monkeypatch)
    with on_site(CONNECTED, commit=False) as site:
        folder = api.content.create(container=site, type="Folder", id="staging", title="Staging")
        for name in ("a", "b"):
            api.content.create(container=folder, type="Document", id=name, title=name.upper())
        assert titles(site) == {"staging": "Staging", "a": "A", "b": "B"}
        assert [kind for kind, _n, _clear in log.take()] == ["whole"]

        folder["a"].setTitle("A2")
        folder["a"].reindexObject()
        assert titles(site)["a"] == "A2"
        assert log.take() == [("append", 1, False)]
        assert titles(site)["a"] == "A2"
        assert log.take() == []  # nothing changed, nothing sent

        # A rollback that changes an entry back: appended as it is again.
        savepoint = transaction.savepoint()
        folder["b"].setTitle("B2")
        folder["b"].reindexObject()
        assert titles(site)["b"] == "B2"
        assert log.take() == [("append", 1, False)]
        savepoint.rollback()
        assert titles(site) == {"staging": "Staging", "a": "A2", "b": "B"}
        assert log.take() == [("append", 1, False)]

        # A rollback that removes entries: the batch is staged whole again, without them.
        savepoint = transaction.savepoint()
        api.content.create(container=folder, type="Document", id="c", title="C")
        assert titles(site)["c"] == "C"
        assert [kind for kind, _n, _clear in log.take()] == ["append"]
        savepoint.rollback()
        assert titles(site) == {"staging": "Staging", "a": "A2", "b": "B"}
        assert [kind for kind, _n, _clear in log.take()] == ["whole"]

        # A clear: staged whole as a clear; what is catalogued after it is appended.
        site.portal_catalog.manage_catalogClear()
        assert titles(site) == {}
        assert log.take() == [("whole", 0, True)]
        site.portal_catalog.catalog_object(folder["a"])
        assert titles(site) == {"a": "A2"}
        assert log.take() == [("append", 1, False)]
        site.portal_catalog.manage_catalogClear()
        assert titles(site) == {}
        assert log.take() == [("whole", 0, True)]
    # Aborted: the service never saw any of it.
    with on_site(CONNECTED, commit=False) as site:
        assert titles(site) == {}
    assert [kind for kind, _n, _clear in log.take()] == []
