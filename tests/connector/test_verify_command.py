"""The verify command: ``@@catalog-service-verify`` through the publisher, and ``scripts.py`` as
``bin/instance run`` and ``zconsole run`` execute it.

Drift is made on purpose: a phantom (an object gone from ZODB without leaving the catalog), a
missing entry (an object uncatalogued), a stale value (a title changed without a reindex).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import transaction
from plone import api
from plone.testing import zope
from zExceptions import Unauthorized

from plone_connector.catalog import scripts
from plone_connector.catalog.client import get_client
from plone_connector.catalog.tool import catalog_uid
from tests.connector.sites import CONNECTED, PASSWORD, delete_from, on_site, service_catalog_id

pytestmark = [pytest.mark.slow, pytest.mark.plone]

FOLDER = "drift"
BASE = f"/{CONNECTED}/{FOLDER}"
PHANTOM, MISSING, STALE = f"{BASE}/phantom", f"{BASE}/missing", f"{BASE}/stale"


def make_drift() -> None:
    with on_site(CONNECTED) as site:
        folder = api.content.create(container=site, type="Folder", id=FOLDER, title="Drift")
        # The phantom last: its silent removal shifts no sibling's position.
        for name in ("missing", "stale", "fine", "phantom"):
            api.content.create(container=folder, type="Document", id=name, title=f"{name} page")
    with on_site(CONNECTED) as site:
        folder = site[FOLDER]
        folder._delObject("phantom", suppress_events=True)  # no event: the catalog keeps it
        site.portal_catalog.uncatalog_object(MISSING)
        folder["stale"].title = "Retitled without a reindex"


def service_entry(path: str) -> dict | None:
    return get_client().get_object(service_catalog_id(), catalog_uid(path))


def browser(app, user: str | None):
    b = zope.Browser(app)
    b.handleErrors = False
    if user:
        b.addHeader("Authorization", f"Basic {user}:{PASSWORD}")
    return b


def drift_in_folder(report: dict) -> dict:
    return {
        "missing": [p for p in report["missing"] if p.startswith(BASE)],
        "phantom": [p for p in report["phantom"] if p.startswith(BASE)],
        "stale": {p: names for p, names in report["stale"].items() if p.startswith(BASE)},
    }


def assert_found(report: dict) -> None:
    found = drift_in_folder(report)
    assert found["missing"] == [MISSING]
    assert found["phantom"] == [PHANTOM]
    assert list(found["stale"]) == [STALE]
    assert {"Title", "sortable_title", "SearchableText"} <= set(found["stale"][STALE])
    assert report["clean"] is False


@pytest.fixture
def drift(plone_sites):
    make_drift()
    yield
    # The phantom's entry, if a test left it: nothing in ZODB will remove it.
    if service_entry(PHANTOM) is not None:
        with on_site(CONNECTED) as site:
            site.portal_catalog.uncatalog_object(PHANTOM)
    delete_from(CONNECTED, FOLDER)


def test_view_reports_and_repairs_drift(drift):
    with zope.zopeApp() as app:
        manager = browser(app, "manager")
        manager.open(f"http://nohost/{CONNECTED}/@@catalog-service-verify")
        assert manager.headers["Content-Type"].startswith("application/json")
        report = json.loads(manager.contents)
        assert_found(report)
        assert report["repaired"] is False
        assert report["checked"] > 4
    # Reporting changed nothing.
    assert service_entry(PHANTOM) is not None and service_entry(MISSING) is None

    with zope.zopeApp() as app:
        manager = browser(app, "manager")
        manager.post(f"http://nohost/{CONNECTED}/@@catalog-service-verify?repair=1", "")
        repaired = json.loads(manager.contents)
    assert_found(repaired)  # what it found, and then repaired
    assert repaired["repaired"] is True
    assert service_entry(PHANTOM) is None
    assert service_entry(MISSING)["path"] == MISSING
    assert service_entry(STALE)["metadata"]["Title"] == "Retitled without a reindex"

    with zope.zopeApp() as app:
        manager = browser(app, "manager")
        manager.open(f"http://nohost/{CONNECTED}/@@catalog-service-verify")
        after = json.loads(manager.contents)
    assert drift_in_folder(after) == {"missing": [], "phantom": [], "stale": {}}


def test_view_refuses_to_repair_on_get(drift):
    """plone.protect aborts a GET's writes: the view used to answer "repaired" and repair nothing."""
    with zope.zopeApp() as app:
        manager = browser(app, "manager")
        manager.raiseHttpErrors = False
        manager.open(f"http://nohost/{CONNECTED}/@@catalog-service-verify?repair=1")
        assert manager.headers["Status"].startswith("405")
        assert manager.headers["Allow"] == "POST"
        assert "POST" in json.loads(manager.contents)["detail"]
    assert service_entry(PHANTOM) is not None and service_entry(MISSING) is None


@pytest.mark.parametrize("user", [None, "editor"])
def test_view_is_for_managers_only(drift, user):
    with zope.zopeApp() as app:
        other = browser(app, user)
        with pytest.raises(Unauthorized):
            other.post(f"http://nohost/{CONNECTED}/@@catalog-service-verify?repair=1", "")
    assert service_entry(PHANTOM) is not None  # nothing repaired


def test_anonymous_is_sent_to_the_login_form(drift):
    with zope.zopeApp() as app:
        anonymous = zope.Browser(app)
        anonymous.raiseHttpErrors = False
        anonymous.open(f"http://nohost/{CONNECTED}/@@catalog-service-verify")
        assert "login" in anonymous.url
        assert "missing" not in anonymous.contents


def test_script_main_reports_and_repairs(drift, capsys):
    # scripts.main as `bin/instance run` calls it, with the layer's app (a subprocess would need a
    # zope.conf instance and a ZODB holding a Plone site; the test site lives in a DemoStorage).
    with zope.zopeApp() as app:
        assert scripts.main(app, [CONNECTED]) == 1
        transaction.abort()
    report = json.loads(capsys.readouterr().out)
    assert_found(report)
    assert report["repaired"] is False
    assert service_entry(PHANTOM) is not None

    with zope.zopeApp() as app:
        assert scripts.main(app, [CONNECTED, "--repair"]) == 1  # drift was found (and repaired)
    assert json.loads(capsys.readouterr().out)["repaired"] is True
    assert service_entry(PHANTOM) is None
    assert service_entry(MISSING) is not None

    with zope.zopeApp() as app:
        scripts.main(app, [CONNECTED])
        transaction.abort()
    assert drift_in_folder(json.loads(capsys.readouterr().out)) == {"missing": [], "phantom": [], "stale": {}}


@pytest.mark.parametrize("runner", ["instance", "zconsole"])
def test_script_file_runs_as_the_zope_runners_run_it(drift, capsys, monkeypatch, runner):
    """The file itself, executed as Zope's runners execute a script: its source compiled and run
    with ``app`` in its globals and ``__name__`` "__main__"; sys.argv as each runner leaves it."""
    script = Path(scripts.__file__)
    if runner == "instance":  # plone.recipe.zope2instance: sys.argv = [script, *args]
        argv = [str(script), CONNECTED]
    else:  # Zope's zconsole leaves its own command line
        argv = ["zconsole", "run", "etc/zope.conf", str(script), CONNECTED]
    monkeypatch.setattr(sys, "argv", argv)
    with zope.zopeApp() as app:
        code = compile(script.read_text(), str(script), "exec")
        with pytest.raises(SystemExit) as exited:
            exec(code, {"__name__": "__main__", "app": app})
        transaction.abort()
    assert exited.value.code == 1
    assert_found(json.loads(capsys.readouterr().out))
