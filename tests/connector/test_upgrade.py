"""The upgrade step to profile version 2 (and installing again) make the tool's ``_catalog`` a
ServiceCatalog as ZODB stores it, so that a process started afterwards loads it as one."""

from __future__ import annotations

import pytest
import transaction
from Acquisition import aq_base
from plone.testing import zope
from Products.ZCatalog.Catalog import Catalog

from plone_connector.catalog.indexes import ServiceCatalog
from tests.connector.sites import CONNECTED, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]


def catalog_class_as_loaded() -> type:
    """The class of the connector site's ``portal_catalog._catalog`` as a connection with an empty
    cache (a process started now) loads it."""
    with zope.zopeApp() as app:
        db = app._p_jar.db()
    manager = transaction.TransactionManager()
    conn = db.open(transaction_manager=manager)
    try:
        conn._resetCache()  # a pooled connection keeps the objects it loaded before
        site = conn.root()["Application"][CONNECTED]
        return type(aq_base(aq_base(site.portal_catalog)._catalog))
    finally:
        manager.abort()
        conn.close()


def make_version_1_site() -> None:
    """The tool as profile version 1 left it: its _catalog a plain ZCatalog Catalog."""
    with on_site(CONNECTED) as site:
        tool = aq_base(site.portal_catalog)
        catalog = aq_base(tool._catalog)
        catalog.__class__ = Catalog
        catalog._p_changed = True
        tool._p_changed = True
    assert catalog_class_as_loaded() is Catalog


def test_upgrade_step_makes_the_stored_catalog_a_service_catalog(plone_sites):
    from plone_connector.catalog.setuphandlers import upgrade_index_views

    make_version_1_site()
    try:
        with on_site(CONNECTED) as site:
            upgrade_index_views(site.portal_setup)
            assert type(aq_base(site.portal_catalog._catalog)) is ServiceCatalog
        # Before the tool was written too, this was Catalog: the tool's reference names the class.
        assert catalog_class_as_loaded() is ServiceCatalog
    finally:
        with on_site(CONNECTED) as site:
            upgrade_index_views(site.portal_setup)


def test_installing_again_makes_the_stored_catalog_a_service_catalog(plone_sites):
    from plone_connector.catalog.setuphandlers import install_service_catalog, upgrade_index_views

    make_version_1_site()
    try:
        with on_site(CONNECTED) as site:
            install_service_catalog(site)
        assert catalog_class_as_loaded() is ServiceCatalog
    finally:
        with on_site(CONNECTED) as site:
            upgrade_index_views(site.portal_setup)


def test_upgrade_in_a_connection_that_cached_the_catalog_before_rewrites_the_reference(plone_sites):
    """A pooled connection that loaded ``_catalog`` as a ServiceCatalog keeps that class for it
    after another connection made it a Catalog (invalidation makes a ghost, not a new object): an
    upgrade run there must still write the tool, whose stored reference names the class."""
    from zope.component.hooks import setSite

    from plone_connector.catalog.setuphandlers import upgrade_index_views

    with zope.zopeApp() as app:
        db = app._p_jar.db()
    manager = transaction.TransactionManager()
    conn = db.open(transaction_manager=manager)
    try:
        site = conn.root()["Application"][CONNECTED]
        # Held here as a long-lived connection's cache can hold it (until the cyclic garbage
        # collector runs, say): the tool's reference then resolves to this object by its oid.
        cached = aq_base(aq_base(site.portal_catalog)._catalog)
        assert type(cached) is ServiceCatalog
        make_version_1_site()  # in another connection of the pool
        manager.begin()
        assert aq_base(aq_base(site.portal_catalog)._catalog) is cached
        assert type(cached) is ServiceCatalog
        setSite(site)
        try:
            upgrade_index_views(site.portal_setup)
            manager.commit()
        finally:
            setSite(None)
        assert catalog_class_as_loaded() is ServiceCatalog
    finally:
        manager.abort()
        conn.close()
        with on_site(CONNECTED) as site:
            upgrade_index_views(site.portal_setup)
