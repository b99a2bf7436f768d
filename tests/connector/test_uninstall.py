"""Uninstalling the connector gives the site a stock ZCatalog again, rebuilt from ZODB, and drops
the site's catalog in the service once the uninstall has committed."""

from __future__ import annotations

import pytest
import transaction
from Acquisition import aq_base
from plone.app.testing import SITE_OWNER_NAME
from plone.testing import zope
from zope.component.hooks import setSite

from tests.connector.sites import add_site, delete_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

SITE = "uninstall-site"


def answers(site) -> dict:
    """What the site's catalog answers, unrestricted and to the current user, for a few queries."""
    catalog = site.portal_catalog
    base = "/".join(site.getPhysicalPath())
    queries = {
        "all": {"path": base},
        "contents": {"path": {"query": base + "/folder", "depth": 1}, "sort_on": "getObjPositionInParent"},
        "documents": {"portal_type": "Document", "sort_on": "sortable_title"},
        "text": {"SearchableText": "rhubarb"},
        "subject": {"Subject": "fruit", "sort_on": "sortable_title"},
        "published": {"review_state": "published", "sort_on": "sortable_title"},
    }
    found = {}
    for name, query in queries.items():
        rows = [(b.getPath(), b.Title, b.review_state) for b in catalog.unrestrictedSearchResults(**query)]
        found[name] = rows if "sort_on" in query else sorted(rows)
    found["restricted"] = [b.getPath() for b in catalog(path=base, sort_on="sortable_title")]
    return found


def test_uninstall_restores_a_zcatalog_that_answers_as_before(plone_sites):
    from plone import api
    from plone.app.testing import applyProfile
    from plone.base.utils import get_installer
    from Products.CMFCore.interfaces import ICatalogTool
    from Products.CMFPlone.CatalogTool import CatalogTool
    from zope.component import getUtility

    from plone_connector.catalog.client import get_client
    from plone_connector.catalog.errors import ServiceRejected
    from plone_connector.catalog.setuphandlers import PLONE_TOOL_CLASS, uninstall_service_catalog
    from plone_connector.catalog.tool import ServiceCatalogTool

    with zope.zopeApp() as app:
        site = add_site(app, SITE, "Uninstall")
        folder = api.content.create(container=site, type="Folder", id="folder", title="Folder")
        api.content.create(container=folder, type="Document", id="before", title="Before install",
                           subject=("fruit",))
        transaction.commit()
        applyProfile(site, "plone_connector:default")
        transaction.commit()
    try:
        with zope.zopeApp() as app:
            site = app[SITE]
            setSite(site)
            zope.login(app["acl_users"], SITE_OWNER_NAME)
            assert isinstance(aq_base(site.portal_catalog), ServiceCatalogTool)
            # Content made while the connector is installed lives only in the service's catalog.
            folder = site["folder"]
            api.content.create(container=folder, type="Document", id="during", title="Rhubarb pie",
                               subject=("fruit", "cake"))
            news = api.content.create(container=folder, type="News Item", id="news", title="Apple news")
            api.content.transition(news, "publish")
            api.content.transition(folder, "publish")
            site["folder"].moveObjectsToTop(["news"])
            transaction.commit()
            zope.logout()
            before = answers(site)  # as anonymous
            counter = site.portal_catalog.getCounter()
            transaction.commit()
        assert [p for p, _title, _state in before["contents"]] == [
            f"/{SITE}/folder/news", f"/{SITE}/folder/before", f"/{SITE}/folder/during"]
        assert len(before["text"]) == 1 and len(before["subject"]) == 2
        assert f"/{SITE}/folder/news" in before["restricted"]
        assert f"/{SITE}/folder/during" not in before["restricted"]

        with zope.zopeApp() as app:
            site = app[SITE]
            setSite(site)
            zope.login(app["acl_users"], SITE_OWNER_NAME)
            catalog_id = site.portal_catalog.catalog_id()
            # An uninstall that does not commit leaves the service's catalog to the site.
            uninstall_service_catalog(site)
            transaction.abort()
            assert get_client().get_catalog(catalog_id).objects == len(before["all"])
            assert get_installer(site).uninstall_product("plone_connector")
            transaction.commit()
        # Committed, the uninstall drops the catalog in the service (nothing keeps it up to date).
        with pytest.raises(ServiceRejected) as dropped:
            get_client().get_catalog(catalog_id)
        assert dropped.value.status == 404

        with zope.zopeApp() as app:
            site = app[SITE]
            setSite(site)
            zope.logout()
            tool = site.portal_catalog
            assert type(aq_base(tool)) is CatalogTool
            assert aq_base(getUtility(ICatalogTool)) is aq_base(tool)
            info = site.portal_setup.getToolsetRegistry().getRequiredToolInfo("portal_catalog")
            assert info["class"] == PLONE_TOOL_CLASS
            # The same answers, from ZCatalog's own indexes (rebuilt from ZODB at uninstall).
            assert answers(site) == before  # as anonymous
            assert len(tool) == len(before["all"])
            # Caches keyed on the counter never see an old value again.
            assert tool.getCounter() > counter
            zope.login(app["acl_users"], SITE_OWNER_NAME)
            api.content.create(container=site["folder"], type="Document", id="after", title="After uninstall")
            transaction.commit()
            assert [b.getPath() for b in tool.unrestrictedSearchResults(getId="after")] == [f"/{SITE}/folder/after"]
    finally:
        delete_site(SITE)
