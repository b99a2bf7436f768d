"""Brains, uniqueValuesFor and the rebuild methods, compared with what stock ZCatalog gives.

Both sites get the same content; a brain of one is compared with the brain of the same relative
path in the other.
"""

from __future__ import annotations

import Missing
import pytest
from AccessControl import Unauthorized
from plone import api

from plone_connector.catalog.verify import verify
from tests.connector.sites import CONNECTED, SITES, STOCK, delete_from, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

ROOT = "brains"
SUBJECTS = ("uv-Zeta", "uv-alpha", "uv-Beta", "uv-\u00e9mile", "uv-10", "uv-9")


@pytest.fixture(scope="module")
def content(plone_sites):
    for name in SITES:
        with on_site(name) as site:
            root = api.content.create(container=site, type="Folder", id=ROOT, title="Brains")
            api.content.transition(root, "publish")
            public = api.content.create(container=root, type="Document", id="public", title="Public",
                                        subject=SUBJECTS[:3])
            api.content.transition(public, "publish")
            api.content.create(container=root, type="Document", id="private", title="Private",
                               subject=SUBJECTS[3:])
            api.content.create(container=root, type="Link", id="link", title="A link",
                               remoteUrl="https://example.org/")
    yield
    for name in SITES:
        delete_from(name, ROOT)


def relative(site, path: str) -> str:
    prefix = "/".join(site.getPhysicalPath())
    assert path.startswith(prefix + "/") or path == prefix
    return path[len(prefix):]


def brains_of(site) -> dict:
    base = "/".join(site.getPhysicalPath()) + "/" + ROOT
    return {relative(site, b.getPath()): b for b in site.portal_catalog.unrestrictedSearchResults(path=base)}


def test_brain_methods_answer_as_zcatalogs(content):
    seen = {}
    for name in SITES:
        with on_site(name, commit=False) as site:
            catalog = site.portal_catalog
            rows = {}
            for path, brain in brains_of(site).items():
                rid = brain.getRID()
                assert isinstance(rid, int)
                assert catalog.getpath(rid) == brain.getPath()
                assert catalog.getrid(brain.getPath()) == rid
                obj = brain.getObject()
                assert obj.getPhysicalPath() == tuple(brain.getPath().split("/"))
                assert brain._unrestrictedGetObject().getPhysicalPath() == obj.getPhysicalPath()
                site_url = site.absolute_url()
                assert brain.getURL().startswith(site_url + "/")
                missing = sorted(column for column in catalog.schema() if getattr(brain, column) is Missing.Value)
                rows[path] = (brain.getURL()[len(site_url):], brain.getURL(relative=1).lstrip("/")[len(name):],
                              missing, brain.Title, brain.getRemoteUrl)
            seen[name] = rows
    assert seen[CONNECTED] == seen[STOCK]
    assert set(seen[STOCK]) == {f"/{ROOT}", f"/{ROOT}/public", f"/{ROOT}/private", f"/{ROOT}/link"}
    # Columns an object has no value for are Missing.Value, as ZCatalog stores them.
    assert "getRemoteUrl" in seen[STOCK][f"/{ROOT}/public"][2]
    assert seen[STOCK][f"/{ROOT}/link"][4] == "https://example.org/"


def test_get_object_checks_permission_and_unrestricted_get_object_does_not(content):
    for name in SITES:
        with on_site(name, user=None, commit=False) as site:
            brain = brains_of(site)[f"/{ROOT}/private"]
            with pytest.raises(Unauthorized):
                brain.getObject()
            assert brain._unrestrictedGetObject().getId() == "private"
            assert brains_of(site)[f"/{ROOT}/public"].getObject().getId() == "public"


def test_unique_values_for_answers_as_zcatalog(content):
    values = {}
    for name in SITES:
        with on_site(name, commit=False) as site:
            catalog = site.portal_catalog
            unique = catalog.uniqueValuesFor("Subject")
            assert isinstance(unique, tuple)
            # Every subject some catalogued object has, once each.
            base = "/".join(site.getPhysicalPath())
            held = {s for b in catalog.unrestrictedSearchResults(path=base) for s in (b.Subject or ())}
            assert sorted(unique) == sorted(held)
            assert "Link" in catalog.uniqueValuesFor("portal_type")
            with pytest.raises(KeyError):
                catalog.uniqueValuesFor("no-such-index")
            values[name] = [v for v in unique if v.startswith("uv-")]
    # In ZCatalog's order (its index's key order).
    assert values[CONNECTED] == values[STOCK]
    assert sorted(values[STOCK]) == sorted(SUBJECTS)


@pytest.mark.parametrize("rebuild", ["manage_catalogRebuild", "clearFindAndRebuild"])
def test_rebuild_leaves_the_catalog_equal_to_zodb(content, rebuild):
    for name in SITES:
        with on_site(name) as site:
            catalog = site.portal_catalog
            root = site[ROOT]
            base = "/".join(root.getPhysicalPath())
            # Drift of every kind: an entry for no object, an object without entry, a stale entry.
            catalog.catalog_object(root["public"], uid=base + "/phantom")
            catalog.uncatalog_object(base + "/link")
            root["private"].title = f"Private, renamed without reindex before {rebuild}"
    with on_site(CONNECTED) as site:
        report = verify(site)
        assert f"/{CONNECTED}/{ROOT}/phantom" in report.phantom
        assert f"/{CONNECTED}/{ROOT}/link" in report.missing
        assert "Title" in report.stale[f"/{CONNECTED}/{ROOT}/private"]
    answers = {}
    for name in SITES:
        with on_site(name) as site:
            getattr(site.portal_catalog, rebuild)()
        with on_site(name, commit=False) as site:
            answers[name] = sorted((path, b.Title) for path, b in brains_of(site).items())
    assert answers[CONNECTED] == answers[STOCK]
    assert (f"/{ROOT}/private", f"Private, renamed without reindex before {rebuild}") in answers[STOCK]
    with on_site(CONNECTED) as site:
        report = verify(site)
        assert report.clean, report.as_dict()
        assert report.checked == len(site.portal_catalog._all_paths())
