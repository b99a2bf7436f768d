"""Installing the connector on a site with content: the service's catalog matches ZODB at once."""

from __future__ import annotations

import pytest
import transaction
from plone.app.testing import SITE_OWNER_NAME
from plone.testing import zope
from zope.component.hooks import setSite

from plone_connector.catalog.verify import verify

pytestmark = [pytest.mark.slow, pytest.mark.plone]

SITE = "fresh-install"


@pytest.mark.parametrize("commit_before_install", [True, False], ids=["existing-site", "new-site"])
def test_verify_is_clean_right_after_install(plone_sites, commit_before_install):
    from plone import api
    from plone.app.testing import applyProfile
    from Products.CMFPlone.factory import addPloneSite

    with zope.zopeApp() as app:
        addPloneSite(app, SITE, title="Fresh", extension_ids=("plone.app.contenttypes:default",))
        site = app[SITE]
        setSite(site)
        zope.login(app["acl_users"], SITE_OWNER_NAME)
        folder = api.content.create(container=site, type="Folder", id="folder", title="Folder")
        api.content.create(container=folder, type="Document", id="doc", title="Doc")
        if commit_before_install:
            transaction.commit()
        applyProfile(site, "plone_connector:default")
        transaction.commit()
    try:
        with zope.zopeApp() as app:
            site = app[SITE]
            setSite(site)
            report = verify(site)
            assert report.checked >= 3  # the root, the folder and the document
            assert report.clean, (report.missing, report.phantom, report.stale)
            # getIndexDataForUID answers what the service stores (it answered {} before).
            data = site.portal_catalog.getIndexDataForUID(f"/{SITE}/folder/doc")
            assert data["portal_type"] == "Document" and data["getId"] == "doc"
    finally:
        with zope.zopeApp() as app:
            setSite(None)
            app.manage_delObjects([SITE])
            transaction.commit()
