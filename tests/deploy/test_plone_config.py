"""The Plone image's Zope instance files, loaded by Zope's own configuration schema."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
from pathlib import Path

import pytest
import ZConfig
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.deploy.compose import ROOT, env_of, load_compose
from tests.pg import create_database, drop_database

ETC = ROOT / "deploy" / "plone" / "etc"
ENTRYPOINT = ROOT / "deploy" / "plone" / "entrypoint.sh"
JSONB_COMPONENT = ROOT / "plone_connector" / "storage" / "component.xml"


@pytest.fixture
def instance(tmp_path, monkeypatch):
    """An instance home laid out like the image's /app: etc/ from the repo, a writable var/."""
    (tmp_path / "etc").symlink_to(ETC)
    (tmp_path / "var").mkdir()
    monkeypatch.setenv("PLONE_INSTANCE", str(tmp_path))
    return tmp_path


def load_zope_conf(storage: str, dsn: str, monkeypatch):
    monkeypatch.setenv("PLONE_STORAGE", storage)
    monkeypatch.setenv("ZODB_DSN", keyword_dsn(dsn))
    return zope_options()


def keyword_dsn(url: str) -> str:
    """The libpq keyword form compose gives Plone (RelStorage cannot extend a URI)."""
    return make_conninfo(**conninfo_to_dict(url))


def zope_options():
    # Zope's own loader (what runwsgi and zconsole use), with its schema and conditional imports.
    from Zope2.Startup.options import ZopeWSGIOptions

    return ZopeWSGIOptions(configfile=str(ETC / "zope.conf"))().configroot


@pytest.fixture
def own_database():
    # RelStorage and our storage would both create object_state: each gets a database of its own.
    dsn, admin = create_database("zodb")
    yield dsn
    drop_database(admin, dsn)


def test_zope_conf_loads_with_relstorage_and_opens_the_database(instance, own_database, monkeypatch):
    conf = load_zope_conf("relstorage", own_database, monkeypatch)
    assert conf.instancehome == str(instance)
    assert conf.debug_mode is False
    (main,) = conf.databases
    assert main.config.mount_points == ["/"]
    # Opening the database connects to PostgreSQL with the DSN from the environment and lets
    # RelStorage install its schema: the section is not just well-formed, it works.
    db = main.open("main", {})
    try:
        assert type(db.storage).__module__.startswith("relstorage")
        assert db.storage._options.keep_history is False
        connection = db.open()
        assert connection.root() is not None
        connection.close()
    finally:
        db.close()


def test_zope_conf_selects_the_jsonb_storage(instance, own_database, monkeypatch):
    if not JSONB_COMPONENT.exists():
        pytest.skip("plone_connector.storage has no ZConfig component.xml (<jsonbstorage>) yet")
    conf = load_zope_conf("jsonb", own_database, monkeypatch)
    (main,) = conf.databases
    db = main.open("main", {})
    try:
        assert type(db.storage).__module__.startswith("plone_connector.storage")
    finally:
        db.close()


def test_zope_conf_needs_its_environment(instance, monkeypatch):
    monkeypatch.delenv("ZODB_DSN", raising=False)
    monkeypatch.setenv("PLONE_STORAGE", "relstorage")
    with pytest.raises(ZConfig.SubstitutionReplacementError, match="ZODB_DSN"):
        zope_options()


def test_wsgi_ini_serves_zope_with_waitress_on_the_given_address():
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ETC / "zope.ini")
    assert ini["app:zope"]["use"] == "egg:Zope#main"
    assert ini["app:zope"]["zope_conf"] == "%(here)s/zope.conf"
    assert ini["server:main"]["use"] == "egg:waitress#main"
    # runwsgi fills it from the command line (entrypoint.sh: http_address=$PLONE_LISTEN).
    assert ini["server:main"]["listen"] == "%(http_address)s"
    assert "http_address=" in ENTRYPOINT.read_text()
    pipeline = ini["pipeline:main"]["pipeline"].split()
    assert pipeline[-1] == "zope"
    for handler in ini["handlers"]["keys"].split(","):
        assert "FileHandler" not in ini[f"handler_{handler.strip()}"]["class"], "containers log to stderr"


def test_site_zcml_loads_plone_and_the_connector():
    text = (ETC / "site.zcml").read_text()
    assert '<include package="Products.CMFPlone" />' in text
    assert '<include package="plone_connector" />' in text
    assert (ROOT / "plone_connector" / "configure.zcml").exists()


def test_site_is_created_with_the_connector_profile():
    script = (ROOT / "deploy" / "plone" / "scripts" / "create_site.py").read_text()
    assert '"plone_connector:default"' in script
    configure = (ROOT / "plone_connector" / "configure.zcml").read_text()
    assert re.search(r'registerProfile\s+name="default"', configure)


def test_compose_gives_plone_a_keyword_dsn_for_the_primary():
    dsn = conninfo_to_dict(env_of(load_compose({})["services"]["plone"])["ZODB_DSN"])
    assert not env_of(load_compose({})["services"]["plone"])["ZODB_DSN"].startswith("postgres")
    catalog = conninfo_to_dict(env_of(load_compose({})["services"]["migrate"])["DATABASE_URL"])
    for key in ("host", "port", "dbname", "user", "password"):
        assert dsn[key] == catalog[key], key


def test_every_variable_compose_gives_plone_is_read_somewhere():
    plone = env_of(load_compose({})["services"]["plone"])
    readers = "\n".join(
        path.read_text()
        for path in [ENTRYPOINT, *ETC.glob("*.conf"), ROOT / "deploy/plone/scripts/create_site.py"]
    )
    readers += (ROOT / "plone_connector" / "catalog" / "settings.py").read_text()
    for name in plone:
        assert re.search(rf"\b{name}\b", readers), f"compose sets {name}, nothing reads it"
    assert plone["PLONE_STORAGE"] in ("jsonb", "relstorage")
    assert (ETC / f"storage-{plone['PLONE_STORAGE']}.conf").exists()


@pytest.mark.parametrize(
    ("env", "message"),
    [({"PLONE_STORAGE": "relstorage"}, "ZODB_DSN is not set"), ({"ZODB_DSN": "x", "PLONE_STORAGE": "mysql"}, "jsonb or relstorage")],
)
def test_entrypoint_refuses_a_bad_environment(tmp_path, env, message):
    result = subprocess.run(
        ["sh", str(ENTRYPOINT), "true"],
        env={"PATH": os.environ["PATH"], "PLONE_INSTANCE": str(tmp_path), **env},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 64
    assert message in result.stderr


def test_entrypoint_runs_other_commands_as_given(tmp_path):
    result = subprocess.run(
        ["sh", str(ENTRYPOINT), "sh", "-c", 'echo "$PLONE_STORAGE $CATALOG_SERVICE_URL"'],
        env={"PATH": os.environ["PATH"], "PLONE_INSTANCE": str(tmp_path), "ZODB_DSN": "postgresql:///x"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["jsonb", "http://catalog:8080"]
    assert (Path(tmp_path) / "var" / "cache").is_dir()
