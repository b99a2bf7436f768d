"""The connector gives the service's catalog what it knows of its site when it installs (or
installs again, or upgrades to profile version 3): the site's path, its types' titles, the
process's time zone and, while the catalog has none, the site's public address and language."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from plone_connector.catalog import site_settings as settings_of
from plone_connector.catalog.setuphandlers import (
    install_service_catalog,
    push_site_settings,
    upgrade_site_settings,
)
from tests.connector.sites import CONNECTED, on_site, service_catalog_id

pytestmark = [pytest.mark.slow, pytest.mark.plone]


@pytest.fixture
def admin(catalog_service):
    with httpx.Client(base_url=catalog_service.url,
                      headers={"Authorization": f"Bearer {catalog_service.admin_token}"}) as client:
        yield client


@pytest.fixture
def catalog(plone_sites, admin):
    """The connected site's catalog, its settings put back afterwards (other modules set some)."""
    catalog_id = service_catalog_id(CONNECTED)
    saved = admin.get(f"/catalogs/{catalog_id}/settings").json()
    yield catalog_id
    assert admin.patch(f"/catalogs/{catalog_id}/settings", json=saved).status_code == 200


def stored(admin, catalog_id) -> dict:
    r = admin.get(f"/catalogs/{catalog_id}/settings")
    assert r.status_code == 200, r.text
    return r.json()


def test_install_sets_path_titles_and_zone(catalog, admin):
    # Reset what install sets, then install again (as re-applying the profile does).
    admin.patch(f"/catalogs/{catalog}/settings",
                json={"site_path": None, "type_titles": None, "timezone": None, "public_url": None})
    with on_site(CONNECTED) as site:
        install_service_catalog(site)
        titles = {fti.getId(): str(fti.Title()) for fti in site.portal_types.objectValues()}
    found = stored(admin, catalog)
    assert found["site_path"] == f"/{CONNECTED}"
    assert found["type_titles"] == titles and found["type_titles"]["Document"] == "Page"
    assert found["timezone"] == settings_of.process_timezone()
    # A site reached without a request answers http://nohost/... or http://foo/...: no public address.
    assert found["public_url"] is None


def test_the_process_zone_is_the_catalogs(catalog, admin, monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Berlin")
    with on_site(CONNECTED) as site:
        push_site_settings(site.portal_catalog)
    assert stored(admin, catalog)["timezone"] == "Europe/Berlin"
    monkeypatch.setenv("TZ", "not a zone")
    with on_site(CONNECTED) as site:
        upgrade_site_settings(site.portal_setup)
    assert stored(admin, catalog)["timezone"] == settings_of.process_timezone()


def test_a_real_address_is_the_public_url_unless_one_is_set(catalog, admin):
    admin.patch(f"/catalogs/{catalog}/settings", json={"public_url": None})
    with on_site(CONNECTED) as site:
        site.REQUEST.setServerURL("https", "www.example.org")
        assert site.absolute_url() == f"https://www.example.org/{CONNECTED}"
        push_site_settings(site.portal_catalog)
    assert stored(admin, catalog)["public_url"] == f"https://www.example.org/{CONNECTED}"
    # An operator's address (a frontend's) stays.
    admin.patch(f"/catalogs/{catalog}/settings", json={"public_url": "https://front.example"})
    with on_site(CONNECTED) as site:
        site.REQUEST.setServerURL("https", "backend.example")
        push_site_settings(site.portal_catalog)
    assert stored(admin, catalog)["public_url"] == "https://front.example"


def test_the_sites_language_unless_one_is_set(catalog, admin):
    from plone.registry.interfaces import IRegistry
    from zope.component import getUtility

    admin.patch(f"/catalogs/{catalog}/settings", json={"language": None})
    with on_site(CONNECTED) as site:
        registry = getUtility(IRegistry, context=site)
        saved = registry["plone.default_language"]
        try:
            registry["plone.default_language"] = "pt-br"
            push_site_settings(site.portal_catalog)
            assert stored(admin, catalog)["language"] == "pt"
            # An operator's choice stays.
            admin.patch(f"/catalogs/{catalog}/settings", json={"language": "es"})
            registry["plone.default_language"] = "de"
            push_site_settings(site.portal_catalog)
            assert stored(admin, catalog)["language"] == "es"
            # A language the service has no profile for sets nothing.
            admin.patch(f"/catalogs/{catalog}/settings", json={"language": None})
            registry["plone.default_language"] = "eu"
            push_site_settings(site.portal_catalog)
            assert stored(admin, catalog)["language"] is None
        finally:
            registry["plone.default_language"] = saved


def test_a_refusal_is_logged_and_the_install_goes_on(catalog, admin, monkeypatch, caplog):
    before = stored(admin, catalog)
    # More titles than CatalogSettings holds: the service answers 400.
    monkeypatch.setattr(settings_of, "type_titles_of", lambda portal: {str(i): "t" for i in range(2000)})
    with on_site(CONNECTED) as site:
        install_service_catalog(site)
    assert "could not set the settings of catalog" in caplog.text
    assert stored(admin, catalog) == before


# -- the zone, without Zope ------------------------------------------------------------------------

def test_zone_from_tz_then_the_system(tmp_path: Path):
    zoneinfo = tmp_path / "usr/share/zoneinfo/America"
    zoneinfo.mkdir(parents=True)
    (zoneinfo / "Chicago").write_text("")
    localtime = tmp_path / "localtime"
    os.symlink(zoneinfo / "Chicago", localtime)
    missing = tmp_path / "no-timezone"
    assert settings_of.process_timezone(environ={"TZ": ":Asia/Tokyo"}, localtime=localtime,
                                        timezone_file=missing) == "Asia/Tokyo"
    assert settings_of.process_timezone(environ={"TZ": "CET-1CEST"}, localtime=localtime,
                                        timezone_file=missing) == "America/Chicago"
    copied = tmp_path / "copied-localtime"
    copied.write_text("")
    timezone_file = tmp_path / "timezone"
    timezone_file.write_text("Europe/Lisbon\n")
    assert settings_of.process_timezone(environ={}, localtime=copied, timezone_file=timezone_file) == "Europe/Lisbon"
    assert settings_of.process_timezone(environ={}, localtime=copied, timezone_file=missing) is None
