"""What a user sees when the catalog service is down: the 503 page, at query time and at commit."""

from __future__ import annotations

import pytest
from plone import api
from plone.locking.interfaces import ILockable
from plone.testing import zope

from plone_connector.catalog.cache import query_cache
from tests.connector.sites import CONNECTED, PASSWORD, delete_from, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

ERROR_PAGE_TITLE = "Search is temporarily unavailable"


def browser(app, user=None):
    b = zope.Browser(app)
    b.handleErrors = True  # as in production: the publisher renders the exception's view
    b.raiseHttpErrors = False
    if user:
        b.addHeader("Authorization", f"Basic {user}:{PASSWORD}")
    return b


def search_during_outage(b, catalog_service) -> None:
    """Search the connector site with ``b`` while the service is down."""
    query_cache.clear()  # an answer cached earlier would hide the outage
    with catalog_service.killed():
        b.open(f"http://nohost/{CONNECTED}/@@search?SearchableText=outage")


def test_a_query_with_the_service_down_shows_the_503_page(plone_sites, catalog_service):
    with zope.zopeApp() as app:
        anonymous = browser(app)
        search_during_outage(anonymous, catalog_service)
        assert anonymous.headers["Status"].startswith("503")
        assert anonymous.headers["Retry-After"] == "30"
        assert ERROR_PAGE_TITLE in anonymous.contents
        # The reason names the service's internal address: not for anonymous visitors.
        assert "is not reachable" not in anonymous.contents
        assert "127.0.0.1" not in anonymous.contents


def test_site_managers_see_why_the_service_is_unavailable(plone_sites, catalog_service):
    with zope.zopeApp() as app:
        manager = browser(app, "manager")
        search_during_outage(manager, catalog_service)
        assert manager.headers["Status"].startswith("503")
        assert "is not reachable" in manager.contents


def test_a_commit_with_the_service_down_shows_the_503_page_and_saves_nothing(plone_sites, catalog_service):
    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Document", id="outage-edit", title="Before the outage")
    try:
        with zope.zopeApp() as app:
            editor = browser(app, "manager")
            editor.open(f"http://nohost/{CONNECTED}/outage-edit/@@edit")
            assert editor.headers["Status"].startswith("200")
            editor.getControl(name="form.widgets.IDublinCore.title").value = "During the outage"
            with catalog_service.killed():
                editor.getControl(name="form.buttons.save").click()
            assert editor.headers["Status"].startswith("503")
            assert ERROR_PAGE_TITLE in editor.contents
            # The vote failed (the edit itself sends no query): the page says that nothing was saved.
            assert "nothing was saved" in editor.contents
        with on_site(CONNECTED) as site:
            assert site["outage-edit"].title == "Before the outage"
            brains = site.portal_catalog.unrestrictedSearchResults(getId="outage-edit")
            assert [b.Title for b in brains] == ["Before the outage"]
    finally:
        with on_site(CONNECTED) as site:
            ILockable(site["outage-edit"]).clear_locks()  # the edit form locked it
        delete_from(CONNECTED, "outage-edit")
