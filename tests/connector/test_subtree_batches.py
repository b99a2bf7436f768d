"""Renaming, moving and copying a tree: one transaction sends one batch, and that batch gives every
object of the subtree its new path in the service. The queries made meanwhile (one per moved
object) stage the batch once and then append only what changed."""

from __future__ import annotations

import pytest
from plone import api

from catalog_schemas.api import SearchRequest
from plone_connector.catalog.client import get_client
from plone_connector.catalog.verify import verify
from tests.connector.sites import CONNECTED, delete_from, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

ROOT = "trees"
BATCH_CALLS = ("stage_batch", "append_batch", "commit_batch", "abort_batch", "apply_batch")


class BatchLog:
    """The batch requests the process's client sends (the real calls, recorded on the way)."""

    def __init__(self, client, monkeypatch):
        self.calls: list[tuple[str, str]] = []
        for name in BATCH_CALLS:
            monkeypatch.setattr(client, name, self._recording(name, getattr(client, name)))

    def _recording(self, name, call):
        def record(catalog_id, batch, *args, **kw):
            self.calls.append((name, batch if isinstance(batch, str) else batch.batch_id))
            return call(catalog_id, batch, *args, **kw)

        return record

    def take(self) -> list[tuple[str, str]]:
        calls, self.calls = self.calls, []
        return calls


def service_paths(site, path: str) -> set[str]:
    """The paths the service itself holds at or under ``path`` (not through the tool)."""
    client = get_client()
    request = SearchRequest(query={"path": path}, metadata=[], b_size=1000, show_inactive=True)
    result = client.search(site.portal_catalog.catalog_id(), request, None, unrestricted=True)
    assert result.items_total == len(result.items)
    return {item["path"] for item in result.items}


def zodb_paths(obj) -> set[str]:
    found = {"/".join(obj.getPhysicalPath())}
    for _id, child in obj.ZopeFind(obj, search_sub=True):
        found.add("/".join(child.getPhysicalPath()))
    return found


def drift(site) -> dict:
    report = verify(site).as_dict()
    return {key: report[key] for key in ("missing", "phantom", "stale")}


@pytest.fixture
def tree_removed_after(plone_sites):
    yield
    delete_from(CONNECTED, ROOT)


def test_rename_move_and_copy_of_a_tree_send_one_batch_each(tree_removed_after, monkeypatch):
    with on_site(CONNECTED) as site:
        root = api.content.create(container=site, type="Folder", id=ROOT, title="Trees")
        outer = api.content.create(container=root, type="Folder", id="outer", title="Outer")
        inner = api.content.create(container=outer, type="Folder", id="inner", title="Inner")
        deeper = api.content.create(container=inner, type="Folder", id="deeper", title="Deeper")
        for parent in (outer, inner, deeper):
            for name in ("page-1", "page-2"):
                api.content.create(container=parent, type="Document", id=name, title=f"{parent.id} {name}")
        api.content.create(container=root, type="Folder", id="target", title="Target")
    with on_site(CONNECTED, commit=False) as site:
        before = drift(site)
    base = f"/{CONNECTED}/{ROOT}"
    log = BatchLog(get_client(), monkeypatch)

    def one_batch(action):
        """Run ``action`` in one transaction; the batch calls it caused, checked to be one batch."""
        with on_site(CONNECTED) as site:
            action(site[ROOT])
        calls = log.take()
        batch_ids = {batch_id for _name, batch_id in calls}
        assert len(batch_ids) == 1, calls
        assert [name for name, _id in calls].count("commit_batch") == 1, calls
        names = [name for name, _id in calls]
        assert set(names) <= {"stage_batch", "append_batch", "commit_batch"}, calls
        assert names.count("stage_batch") == 1, calls  # staged whole once, then appended to
        return calls

    # Rename: the folder and its eight descendants move to /renamed.
    one_batch(lambda root: api.content.rename(obj=root["outer"], new_id="renamed"))
    with on_site(CONNECTED, commit=False) as site:
        renamed = site[ROOT]["renamed"]
        assert len(zodb_paths(renamed)) == 9
        assert service_paths(site, f"{base}/renamed") == zodb_paths(renamed)
        assert service_paths(site, f"{base}/outer") == set()

    # Move: a subtree of the renamed folder into another folder.
    one_batch(lambda root: api.content.move(source=root["renamed"]["inner"], target=root["target"]))
    with on_site(CONNECTED, commit=False) as site:
        moved = site[ROOT]["target"]["inner"]
        assert len(zodb_paths(moved)) == 6
        assert service_paths(site, f"{base}/target/inner") == zodb_paths(moved)
        assert service_paths(site, f"{base}/renamed/inner") == set()
        assert service_paths(site, f"{base}/renamed") == zodb_paths(site[ROOT]["renamed"])

    # Copy: the moved subtree again, beside it; the original stays.
    one_batch(lambda root: api.content.copy(source=root["target"]["inner"], target=root, id="inner-copy"))
    with on_site(CONNECTED, commit=False) as site:
        copied = site[ROOT]["inner-copy"]
        assert len(zodb_paths(copied)) == 6
        assert service_paths(site, f"{base}/inner-copy") == zodb_paths(copied)
        assert service_paths(site, f"{base}/target/inner") == zodb_paths(site[ROOT]["target"]["inner"])
        assert service_paths(site, base) == zodb_paths(site[ROOT])
        # Every index and metadata value of the tree matches its objects (paths, ids, parents'
        # positions); what verify found before the test (the fresh site's root) is all it finds.
        after = drift(site)
    assert after == before
    assert not [path for kind in after.values() for path in kind if path.startswith(base)]


class EntryLog:
    """How many entries the process's client sends in stagings (whole or appended), per call."""

    def __init__(self, client, monkeypatch):
        self.sent: list[tuple[str, int]] = []
        monkeypatch.setattr(client, "stage_batch", self._recording("stage_batch", client.stage_batch))
        monkeypatch.setattr(client, "append_batch", self._recording("append_batch", client.append_batch))

    def _recording(self, name, call):
        def record(catalog_id, *args):
            self.sent.append((name, len(args[-1].entries)))
            return call(catalog_id, *args)

        return record

    def take(self) -> list[tuple[str, int]]:
        sent, self.sent = self.sent, []
        return sent


CHILDREN = 30


@pytest.mark.parametrize("action", ["rename", "move"])
def test_moving_a_large_folder_sends_each_change_about_once(tree_removed_after, monkeypatch, action):
    """plone.app.discussion queries the catalog once per moved object, and each query must see the
    transaction's changes: the staged batch grows by appending, not by sending it whole again."""
    with on_site(CONNECTED) as site:
        root = api.content.create(container=site, type="Folder", id=ROOT, title="Trees")
        big = api.content.create(container=root, type="Folder", id="big", title="Big")
        for i in range(CHILDREN):
            api.content.create(container=big, type="Document", id=f"page-{i}", title=f"Page {i}")
        api.content.create(container=root, type="Folder", id="target", title="Target")
    with on_site(CONNECTED, commit=False) as site:
        before = drift(site)
    log = EntryLog(get_client(), monkeypatch)
    actions = {
        "rename": (lambda root: api.content.rename(obj=root["big"], new_id="renamed"), "renamed"),
        "move": (lambda root: api.content.move(source=root["big"], target=root["target"]), "target/big"),
    }
    change, new_path = actions[action]
    with on_site(CONNECTED) as site:
        change(site[ROOT])
    sent = log.take()
    objects = CHILDREN + 1
    entries = sum(n for _name, n in sent)
    # The queries really staged again and again (else this test would prove nothing) ...
    assert len(sent) > objects // 2, sent
    # ... yet every object's change (an unindex and an index where it moves) went about once. The
    # whole batch before every query sent 1,582 entries for the rename, 1,552 for the move.
    assert entries <= 3 * objects, sent
    base = f"/{CONNECTED}/{ROOT}"
    with on_site(CONNECTED, commit=False) as site:
        moved = site.unrestrictedTraverse(f"{ROOT}/{new_path}")
        assert len(zodb_paths(moved)) == objects
        assert service_paths(site, f"{base}/{new_path}") == zodb_paths(moved)
        assert service_paths(site, f"{base}/big") == set()
        assert service_paths(site, base) == zodb_paths(site[ROOT])
        after = drift(site)
    assert after == before
    assert not [path for kind in after.values() for path in kind if path.startswith(base)]
