"""Every record of a real Plone site through the JSON state transcoder.

A Plone site (plone.app.contenttypes fixture) gets users, folders, pages, news items,
events, links, files, workflow history, local roles, portlets and relations; then every
record reachable from the root, as ZODB wrote it, is encoded, written as JSON text, decoded,
and loaded by ZODB's own reader: the state must pickle again to the same bytes.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json

import pytest
from ZODB.serialize import referencesf
from ZODB.utils import z64

from plone_connector.storage.jsonstate import decode_record, encode_record, json_dumps
from plone_connector.storage.jsonstate_tree import load_structure, same_structure

pytestmark = [pytest.mark.slow, pytest.mark.plone]


def _layer_order(layer) -> list:
    """Bases before the layers built on them, each once (what zope.testrunner does)."""
    ordered: list = []

    def visit(item):
        for base in item.__bases__:
            visit(base)
        if item not in ordered:
            ordered.append(item)

    visit(layer)
    return ordered


def _fill_site(portal) -> None:
    import datetime

    from plone.app.testing import TEST_USER_ID, setRoles
    from plone.app.textfield.value import RichTextValue
    from plone.namedfile.file import NamedBlobFile
    from z3c.relationfield import RelationValue
    from zope.component import getMultiAdapter, getUtility
    from zope.intid.interfaces import IIntIds

    setRoles(portal, TEST_USER_ID, ["Manager"])
    acl = portal.acl_users
    for number in range(5):
        acl.userFolderAddUser(f"user{number}", "secret-pw-1", ["Member"], [])
    workflow = portal.portal_workflow
    for number in range(10):
        folder_id = portal.invokeFactory("Folder", f"folder-{number}", title=f"Folder {number} é")
        folder = portal[folder_id]
        folder.manage_setLocalRoles("user1", ["Editor", "Reader"])
        for item in range(5):
            doc = folder[folder.invokeFactory("Document", f"page {item}", title=f"Page {item} — ü")]
            doc.text = RichTextValue(f"<p>Body {item} &amp; more</p>", "text/html", "text/x-html-safe")
            doc.subject = ("alpha", f"tag{item}")
            workflow.doActionFor(doc, "publish")
        news = folder[folder.invokeFactory("News Item", "news", title="News")]
        news.effective_date = None
        event = folder[folder.invokeFactory("Event", "event", title="Event")]
        event.start = datetime.datetime(2024, 5, 1, 10, 0)
        event.end = datetime.datetime(2024, 5, 1, 12, 0)
        folder.invokeFactory("Link", "link", title="Link", remoteUrl="https://example.org/?a=1&b=%20")
        attachment = folder[folder.invokeFactory("File", "file", title="File")]
        attachment.file = NamedBlobFile(b"\x00binary\xff" * 100, filename="data.bin")
        workflow.doActionFor(folder, "publish")
    intids = getUtility(IIntIds)
    target = portal["folder-0"]["page 0"]
    for number in range(1, 5):
        page = portal[f"folder-{number}"]["page 1"]
        page.relatedItems = [RelationValue(intids.getId(target))]

    from plone.app.portlets.portlets import navigation
    from plone.portlets.interfaces import IPortletAssignmentMapping, IPortletManager
    from zope.component import getUtility as get_utility

    manager = get_utility(IPortletManager, name="plone.leftcolumn", context=portal)
    mapping = getMultiAdapter((portal, manager), IPortletAssignmentMapping)
    mapping["jsonstate-nav"] = navigation.Assignment(name="Nav", bottomLevel=2)


def reachable_records(storage) -> dict[bytes, bytes]:
    """Every record reachable from the root, as the storage holds it (pack's view)."""
    records: dict[bytes, bytes] = {}
    todo = collections.deque([z64])
    while todo:
        oid = todo.popleft()
        if oid in records:
            continue
        data = storage.load(oid)[0]
        records[oid] = data
        todo.extend(ref for ref in referencesf(data) if ref not in records)
    return records


@contextlib.contextmanager
def plone_site(storage=None, more=None):
    """A Plone site with content, in a plone.app.testing layer's DemoStorage (dropped afterwards).

    ``storage``: a function returning an empty storage to hold the site instead (it gets the
    Plone fixture's objects in one transaction, then the site's set-up and content as the
    transactions Plone commits, and is closed on exit). ``more(portal)``, if given, adds content
    in transactions of its own after the common content.

    Also used by benchmarks/jsonstate_bench.py and test_convert_plone.py.
    """
    from unittest import mock

    import transaction
    import ZODB
    from plone.app.testing import (
        PLONE_FIXTURE,
        PLONE_SITE_ID,
        TEST_USER_NAME,
        PloneSandboxLayer,
        applyProfile,
        login,
    )
    from plone.testing import zodb
    from plone.testing import zope as zope_testing
    from zope.component.hooks import setSite

    # plone.app.contenttypes.testing needs robotframework; this is its fixture without it.
    class ContentTypesLayer(PloneSandboxLayer):
        defaultBases = (PLONE_FIXTURE,)

        def setUpZope(self, app, configurationContext):
            import plone.app.contenttypes

            self.loadZCML(package=plone.app.contenttypes)

        def setUpPloneSite(self, portal):
            applyProfile(portal, "plone.app.contenttypes:default")
            portal.portal_workflow.setDefaultChain("simple_publication_workflow")

    content_layer = ContentTypesLayer(name="JsonStateContentTypes")
    stack_demo_storage = zodb.stackDemoStorage

    def stacked(base_db, name=None):
        if storage is None or name != content_layer.__name__:
            return stack_demo_storage(base_db, name)
        from tests.e2e.jsonb_layer import seed

        target = storage()
        seed(target, base_db.storage)
        return ZODB.DB(target)

    layers = _layer_order(content_layer)
    done = []
    try:
        with mock.patch.object(zodb, "stackDemoStorage", stacked):
            for layer in layers:
                layer.setUp()
                done.append(layer)
        db = content_layer["zodbDB"]
        with zope_testing.zopeApp(db=db) as app:
            portal = app[PLONE_SITE_ID]
            setSite(portal)
            login(portal, TEST_USER_NAME)
            _fill_site(portal)
            if more is not None:
                transaction.commit()
                more(portal)
            setSite(None)
        transaction.commit()
        yield db
    finally:
        for layer in reversed(done):
            layer.tearDown()


@pytest.fixture(scope="module")
def plone_site_db():
    with plone_site() as db:
        yield db


def _repickle(state) -> bytes:
    """The state pickled again (persistent objects by oid), without memo."""
    from ZODB._compat import PersistentPickler

    out = io.BytesIO()

    def persistent_id(obj):
        return getattr(obj, "_p_oid", None) if hasattr(obj, "_p_jar") and not isinstance(obj, type) else None

    pickler = PersistentPickler(persistent_id, out, 3)
    # No memo: equal strings that happened to be one object must not make a difference.
    pickler.fast = True
    pickler.dump(state)
    return out.getvalue()


def test_every_plone_record_round_trips(plone_site_db):
    records = reachable_records(plone_site_db.storage)
    assert len(records) > 500  # a real site, not an empty root
    conn = plone_site_db.open()
    reader = conn._reader
    exact: dict[str, int] = collections.Counter()
    classes: collections.Counter = collections.Counter()
    for oid, data in records.items():
        encoded = encode_record(data)
        classes[encoded.class_name] += 1
        assert encoded.refs == list(dict.fromkeys(referencesf(data))), oid
        if encoded.exact is not None:
            exact[f"{encoded.class_name}: {encoded.reason}"] += 1
            continue
        rebuilt = decode_record(encoded.class_name, json.loads(json_dumps(encoded.state)))
        assert reader.getClassName(rebuilt) == reader.getClassName(data)
        assert same_structure(load_structure(rebuilt)[1], load_structure(data)[1]), oid
        assert _repickle(reader.getState(rebuilt)) == _repickle(reader.getState(data)), (
            oid,
            encoded.class_name,
        )
    conn.close()
    print(f"\n{len(records)} records, {len(classes)} classes, {sum(exact.values())} kept exact")
    for reason, count in exact.most_common():
        print(f"  exact {count:5d}  {reason}")
    # Every record of a stock Plone site has an exact JSON form.
    assert not exact, dict(exact)
    for must in (
        "Products.CMFPlone.Portal.PloneSite",
        "plone.app.contenttypes.content.Document",
        "plone.app.contenttypes.content.Event",
        "BTrees.OOBTree.OOBucket",
        "plone.registry.field.TextLine",
    ):
        assert classes[must], must


def test_compiled_and_pure_transcoders_agree_on_every_plone_record(plone_site_db):
    """The compiled transcoder (what the storage runs) against its pure Python source, the
    reference (tests/storage/test_transcoder_compiled.py): the same JSON text, references and
    exact copies for every record, and the same bytes decoded back."""
    from plone_connector.storage import jsonstate, transcoder

    pure = transcoder.load_pure()["jsonstate"]
    records = reachable_records(plone_site_db.storage)
    assert len(records) > 500
    for oid, data in records.items():
        results = []
        for module in (jsonstate, pure):
            encoded = module.encode_record(data)
            text = module.json_dumps(encoded.state)
            rebuilt = module.decode_record(encoded.class_name, json.loads(text)) if encoded.exact is None else None
            results.append(
                (encoded.class_name, text, encoded.refs, encoded.exact, encoded.reason, encoded.record, rebuilt)
            )
        assert results[0] == results[1], oid


def test_own_commits_cache_the_bytes_a_load_from_postgresql_rebuilds(plone_site_db, database_url):
    """The record the write path checked, which the storage caches for its own commits
    (EncodedState.record), is what a load rebuilds from the jsonb column: for every record of the
    site, the same bytes."""
    import psycopg

    records = reachable_records(plone_site_db.storage)
    encoded = {oid: encode_record(data) for oid, data in records.items()}
    with psycopg.connect(database_url, autocommit=True) as pg:
        pg.execute("create temporary table s (oid bytea primary key, state jsonb)")
        with pg.cursor() as cur, cur.copy("copy s (oid, state) from stdin") as copy:
            for oid, enc in encoded.items():
                copy.write_row((oid, json_dumps(enc.state)))
        rows = pg.execute("select oid, state::text from s").fetchall()
    assert len(rows) == len(records)
    reordered = 0
    for oid, text in rows:
        enc = encoded[bytes(oid)]
        loaded = json.loads(text)
        from_database = decode_record(enc.class_name, loaded)
        assert enc.record == from_database, oid
        # Format version 2 records dict order: jsonb's order does not change the bytes.
        assert from_database == decode_record(enc.class_name, enc.state), oid
        reordered += json_dumps(loaded) != json_dumps(enc.state)
    # jsonb gave many states back in another member order: the comparisons are not trivial.
    assert reordered > 100, reordered
