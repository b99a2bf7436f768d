"""Plone with the connector under a tiny ZODB cache, on FileStorage, RelStorage and JsonbStorage.

A transaction that touches more objects than the ZODB cache holds is what every real site meets
in its big transactions: site creation, an add-on's install, imports, rebuilds, upgrade steps. At
the final savepoint of such a transaction ZODB turns objects it created into ghosts; touching one
after ``Connection.commit`` and before the storage finished loads it from a storage that does not
have it yet (POSKeyError in the second phase). Each test runs one of those transactions with a
cache of ``CACHE_SIZE`` objects and then checks the site and its catalog against ZODB.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from unittest import mock

import pytest
import transaction
import ZODB
from plone.app.testing import PLONE_FIXTURE, SITE_OWNER_NAME, PloneSandboxLayer
from plone.app.testing import login as plone_login
from plone.app.testing import logout as plone_logout
from plone.testing import zodb, zope
from ZODB.DemoStorage import DemoStorage
from zope.component.hooks import setSite
from zope.globalrequest import setRequest

from plone_connector.catalog.cache import query_cache
from tests.e2e.jsonb_layer import layer_db, layer_set_up, seed
from tests.pg import create_database, drop_database

pytestmark = [pytest.mark.slow, pytest.mark.plone]

CACHE_SIZE = int(os.environ.get("SMALL_CACHE_SIZE", "100"))
KINDS = ("FileStorage", "RelStorage", "JsonbStorage")
DOCUMENTS = 60


class SmallCacheLayer(PloneSandboxLayer):
    """The ZCML of the connector's sites; the sites themselves are made by the tests."""

    defaultBases = (PLONE_FIXTURE,)

    def setUpZope(self, app, configurationContext):
        import plone.app.contenttypes
        import plone.classicui
        import plone.distribution
        import plone.restapi

        import plone_connector

        self.loadZCML(package=plone.app.contenttypes)
        self.loadZCML(package=plone.distribution)
        self.loadZCML(package=plone.classicui)
        self.loadZCML(package=plone.restapi)
        self.loadZCML(package=plone_connector)


    def setUp(self):
        # PloneSandboxLayer stacks a DemoStorage on whatever database is on top (another layer of
        # this session, such as the JSONB layer), and a DemoStorage closes its base when it is
        # closed: this layer's tear-down would close that layer's storage under it.
        def stacked(db=None, name=None):
            return ZODB.DB(DemoStorage(name=name, base=db.storage, close_base_on_close=False))

        with mock.patch.object(zodb, "stackDemoStorage", stacked):
            super().setUp()


SMALL_CACHE_LAYER = SmallCacheLayer(name="SmallCacheLayer")


@pytest.fixture(scope="module")
def zcml(catalog_service):
    with layer_set_up(SMALL_CACHE_LAYER):
        yield SMALL_CACHE_LAYER


def _open_storage(kind: str, dsn: str, blob_dir: str):
    if kind == "FileStorage":
        from ZODB.FileStorage import FileStorage

        return FileStorage(os.path.join(blob_dir, "Data.fs"), blob_dir=os.path.join(blob_dir, "blobs"))
    if kind == "RelStorage":
        from psycopg.conninfo import conninfo_to_dict, make_conninfo
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        from relstorage.options import Options
        from relstorage.storage import RelStorage

        options = Options(keep_history=False, blob_dir=blob_dir, shared_blob_dir=False)
        # Its driver (psycopg2) wants a key=value connection string.
        dsn = make_conninfo(**{k: v for k, v in conninfo_to_dict(dsn).items() if v})
        return RelStorage(PostgreSQLAdapter(dsn=dsn, options=options), options=options)
    from plone_connector.storage import JsonbStorage

    return JsonbStorage(dsn, blob_dir=blob_dir)


@pytest.fixture(params=KINDS)
def small_db(request, zcml):
    """A database on the storage ``request.param`` seeded with the Zope application of Plone's
    fixture, opened with a cache of CACHE_SIZE objects."""
    dsn, admin = create_database("smallcache")
    with tempfile.TemporaryDirectory() as blob_dir:
        storage = _open_storage(request.param, dsn, blob_dir)
        seed(storage, layer_db(PLONE_FIXTURE).storage)
        db = ZODB.DB(storage, cache_size=CACHE_SIZE)
        try:
            yield request.param, db
        finally:
            transaction.abort()
            db.close()
            query_cache.clear()
            drop_database(admin, dsn)


def _site_id(kind: str, connector: bool = True) -> str:
    """A site id (and so the service catalog's id) no other test uses: the service outlives the
    tests' databases."""
    return f"small-{kind.lower()}-{'' if connector else 'stock-'}{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def _as_owner(db, site_id: str):
    """The Zope application in a fresh connection of ``db``, as the site owner, as a request
    would have it; commits at the end (here: zopeApp's own commit swallows a failure)."""
    with mock.patch.dict(os.environ, {"CATALOG_SERVICE_CATALOG_ID": site_id}), zope.zopeApp(db=db) as app:
        setRequest(app.REQUEST)
        plone_login(app, SITE_OWNER_NAME)
        try:
            yield app
            transaction.commit()
        finally:
            plone_logout()
            setSite(None)
            setRequest(None)


def _catalog_paths(site) -> set[str]:
    site_path = "/".join(site.getPhysicalPath())
    return {brain.getPath() for brain in site.portal_catalog.unrestrictedSearchResults(path=site_path)
            if brain.getPath() != site_path}


def _content_paths(site) -> set[str]:
    """What ZODB holds: every content object of the site, the oracle of the catalog."""
    from plone.dexterity.interfaces import IDexterityContent

    found = set()

    def walk(obj):
        for child in obj.objectValues():
            if IDexterityContent.providedBy(child):
                found.add("/".join(child.getPhysicalPath()))
                walk(child)

    walk(site)
    return found


def _check_from_a_cold_cache(db, site_id: str, documents: int) -> None:
    """In a fresh connection with the cache emptied: the catalog holds what ZODB holds, and its
    documents' brains lead to their objects."""
    db.cacheMinimize()
    with _as_owner(db, site_id) as app:
        site = app[site_id]
        setSite(site)
        assert _catalog_paths(site) == _content_paths(site)
        brains = site.portal_catalog(Title="Gartenzwerg", sort_on="getId")
        assert len(brains) == documents
        assert brains[0].getObject().Title() == brains[0].Title


@pytest.mark.parametrize("connector", [True, False], ids=["connector", "stock"])
def test_site_creation_from_a_distribution_with_content(small_db, connector):
    """The classic distribution with its example content: plone.exportimport imports it in a few
    transactions, each touching far more objects than the cache holds, the first of which created
    the site manager. Before, the commit failed in its second phase (CMFCore's queue loaded the
    ghost of the new site manager) with the connector and, at this cache size, stock Plone too."""
    from Products.CMFPlone.factory import addPloneSite

    kind, db = small_db
    site_id = _site_id(kind, connector)
    with _as_owner(db, site_id) as app:
        addPloneSite(app, site_id, title="Small cache", distribution_name="classic", setup_content=True,
                     extension_ids=("plone_connector:default",) if connector else ())
    db.cacheMinimize()
    with _as_owner(db, site_id) as app:
        site = app[site_id]
        setSite(site)
        content = _content_paths(site)
        assert len(content) >= 5  # news, events, Members and the two aggregators
        assert _catalog_paths(site) == content


def test_site_creation_content_rebuild_and_upgrade_with_a_tiny_cache(small_db):
    kind, db = small_db
    site_id = _site_id(kind)
    from Products.CMFPlone.factory import addPloneSite

    with _as_owner(db, site_id) as app:
        addPloneSite(app, site_id, title="Small cache",
                     extension_ids=("plone.app.contenttypes:default", "plone_connector:default"))
    db.cacheMinimize()

    with _as_owner(db, site_id) as app:
        site = app[site_id]
        setSite(site)
        # Content in one transaction: more objects touched than the cache holds.
        site.invokeFactory("Folder", "section", title="Section")
        for n in range(DOCUMENTS):
            site.section.invokeFactory("Document", f"doc-{n}", title=f"Gartenzwerg {n}")
        transaction.commit()
        assert _catalog_paths(site) == _content_paths(site)
        assert len(site.portal_catalog(portal_type="Document")) == DOCUMENTS

        # A rebuild, then an upgrade step (GenericSetup's catalog import and a refresh, as upgrade
        # steps do), each in its own transaction.
        site.portal_catalog.clearFindAndRebuild()
        transaction.commit()
        assert _catalog_paths(site) == _content_paths(site)
        site.portal_setup.runImportStepFromProfile("profile-Products.CMFPlone:plone", "catalog",
                                                   run_dependencies=False)
        site.portal_catalog.refreshCatalog(clear=1)
        transaction.commit()

    _check_from_a_cold_cache(db, site_id, DOCUMENTS)


def test_site_creation_with_the_connector_before_other_profiles(small_db):
    """Profiles applied after the connector's add indexes and columns to the new tool in the same
    transaction: the schema change the connector sends at commit is read from the tool's new
    index objects, which Connection.commit's final savepoint may have made ghosts."""
    from Products.CMFPlone.factory import addPloneSite

    kind, db = small_db
    site_id = _site_id(kind)
    with _as_owner(db, site_id) as app:
        addPloneSite(app, site_id, title="Small cache",
                     extension_ids=("plone_connector:default", "plone.app.contenttypes:default",
                                    "plone.app.contenttypes:plone-content"))
    db.cacheMinimize()
    with _as_owner(db, site_id) as app:
        site = app[site_id]
        setSite(site)
        content = _content_paths(site)
        assert content
        assert _catalog_paths(site) == content
        assert "getObjPositionInParent" in site.portal_catalog.indexes()


def test_an_index_added_in_a_transaction_larger_than_the_cache(small_db):
    """The new index object is a ghost after Connection.commit's final savepoint; the connector
    reads the schema change it sends from the tool before that (tpc_begin), not after."""
    from Products.CMFPlone.factory import addPloneSite

    kind, db = small_db
    site_id = _site_id(kind)
    with _as_owner(db, site_id) as app:
        addPloneSite(app, site_id, title="Small cache",
                     extension_ids=("plone.app.contenttypes:default", "plone_connector:default"))
    with _as_owner(db, site_id) as app:
        site = app[site_id]
        setSite(site)
        site.portal_catalog.addIndex("small_cache_field", "FieldIndex")
        site.portal_catalog.addColumn("small_cache_field")
        site.invokeFactory("Folder", "section", title="Section")
        for n in range(DOCUMENTS):
            site.section.invokeFactory("Document", f"doc-{n}", title=f"Gartenzwerg {n}")
    db.cacheMinimize()
    with _as_owner(db, site_id) as app:
        site = app[site_id]
        setSite(site)
        assert "small_cache_field" in site.portal_catalog.indexes()
        assert len(site.portal_catalog(portal_type="Document", small_cache_field=None)) == 0
        assert _catalog_paths(site) == _content_paths(site)


def test_install_into_an_existing_site_then_rebuild_in_chunks_with_a_tiny_cache(small_db, caplog):
    """The connector installed into a site that has content on stock ZCatalog, then a rebuild:
    each sends the whole site in chunks (appends to one staged batch, a savepoint between), in one
    transaction touching far more objects than the cache holds. Inside the transaction the site's
    queries see the new catalog whole (the transaction's own staged batch); after the commit every
    connection does, and the catalog matches ZODB."""
    import dataclasses
    import logging

    from plone.base.utils import get_installer
    from Products.CMFPlone.factory import addPloneSite

    from plone_connector.catalog.client import get_client
    from plone_connector.catalog.tool import ServiceCatalogTool

    kind, db = small_db
    site_id = _site_id(kind)
    documents = 150
    with _as_owner(db, site_id) as app:
        addPloneSite(app, site_id, title="Small cache", extension_ids=("plone.app.contenttypes:default",))
    with _as_owner(db, site_id) as app:
        site = app[site_id]
        setSite(site)
        site.invokeFactory("Folder", "section", title="Section")
        for n in range(documents):
            site.section.invokeFactory("Document", f"doc-{n}", title=f"Gartenzwerg {n}")
    db.cacheMinimize()

    client = get_client()
    chunked = dataclasses.replace(client.settings, chunk_entries=25)
    # ZCatalog's cache maintenance (a savepoint and a cache GC every `threshold` objects) runs
    # several times in each transaction: the install's first one finds the new tool without a jar
    # (it failed so installing into a site of more than 10,000 objects).
    real_init = ServiceCatalogTool.__init__

    def small_threshold(tool, *args, **kw):
        real_init(tool, *args, **kw)
        tool.threshold = 40

    with mock.patch.object(client, "settings", chunked), mock.patch.object(ServiceCatalogTool, "__init__", small_threshold), \
            caplog.at_level(logging.INFO, "plone_connector.catalog"):
        with _as_owner(db, site_id) as app:
            site = app[site_id]
            setSite(site)
            get_installer(site, site.REQUEST).install_product("plone_connector")
            assert isinstance(site.portal_catalog, ServiceCatalogTool)
            assert len(site.portal_catalog(portal_type="Document")) == documents  # its own staged batch
        installed = [r.getMessage() for r in caplog.records if "objects/s" in r.getMessage()]
        caplog.clear()
        db.cacheMinimize()
        with _as_owner(db, site_id) as app:
            site = app[site_id]
            setSite(site)
            assert _catalog_paths(site) == _content_paths(site)
            site.portal_catalog.clearFindAndRebuild()
        rebuilt = [r.getMessage() for r in caplog.records if "objects/s" in r.getMessage()]
    # Progress lines every chunk, then the total: the site went in several appends each time.
    assert len(installed) >= documents // 25, installed
    assert len(rebuilt) >= documents // 25, rebuilt
    _check_from_a_cold_cache(db, site_id, documents)
