"""Installing the connector on a site with content: the service's catalog matches ZODB at once."""

from __future__ import annotations

import pytest
import transaction
from plone.testing import zope
from zope.component.hooks import setSite

from plone_connector.catalog.verify import verify
from tests.connector.sites import add_site, delete_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

SITE = "fresh-install"


@pytest.mark.parametrize("commit_before_install", [True, False], ids=["existing-site", "new-site"])
def test_verify_is_clean_right_after_install(plone_sites, commit_before_install):
    from plone import api
    from plone.app.testing import applyProfile

    with zope.zopeApp() as app:
        site = add_site(app, SITE, "Fresh")
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
        delete_site(SITE)
