"""The Plone container's process, run here without a container: entrypoint.sh creates the site with
plone_connector:default against a running catalog service, then serves Zope with runwsgi; probed
with compose's healthcheck; a page created through plone.restapi must land in the service's catalog."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.deploy.compose import ROOT, env_of, load_compose
from tests.deploy.test_plone_config import JSONB_COMPONENT
from tests.deploy.test_processes import free_port, local, needs_cli, wait_for
from tests.pg import create_database, drop_database

pytestmark = [pytest.mark.slow, needs_cli]

BIN = Path(sys.executable).parent
ADMIN_TOKEN = "token-for-this-test"
ADMIN_PASSWORD = "admin-password-for-this-test"


@dataclass
class Stack:
    storage: str
    database: str
    site_url: str
    plone_port: int
    plone_env: dict[str, str]
    plone_log: Path
    services: dict


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def storages() -> list[str]:
    return ["relstorage", "jsonb"] if JSONB_COMPONENT.exists() else ["relstorage"]


@pytest.fixture(scope="module", params=storages())
def stack(request):
    storage = request.param
    workdir = Path(tempfile.mkdtemp(prefix="catalog-plone-"))
    database, admin = create_database("plone")
    services = load_compose({"CATALOG_ADMIN_TOKEN": ADMIN_TOKEN})["services"]
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_") and k != "DATABASE_URL"}
    base_env["PATH"] = f"{BIN}{os.pathsep}{base_env['PATH']}"
    running: list[subprocess.Popen] = []
    try:
        # The catalog service, as compose starts it (migrate job, then a replica).
        service_port = free_port()
        service_env = {**base_env, **env_of(services["catalog"]), "DATABASE_URL": database,
                       "CATALOG_REPLICA_URLS": "[]"}
        subprocess.run(local(services["migrate"]["command"], service_port), env=service_env, check=True,
                       capture_output=True, timeout=300)
        service_log = workdir / "service.log"
        with service_log.open("w") as log:
            service = subprocess.Popen(local(services["catalog"]["command"], service_port), env=service_env,
                                       cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        running.append(service)
        assert wait_for(f"http://127.0.0.1:{service_port}/readyz", 200, service, log=service_log) == 200

        # Plone: the image's /app laid out in a folder, compose's environment with local addresses.
        instance = workdir / "app"
        instance.mkdir()
        (instance / "etc").symlink_to(ROOT / "deploy" / "plone" / "etc")
        (instance / "scripts").symlink_to(ROOT / "deploy" / "plone" / "scripts")
        plone_port = free_port()
        plone_env = {
            **base_env,
            **env_of(services["plone"]),
            "PLONE_INSTANCE": str(instance),
            "PLONE_STORAGE": storage,
            "PLONE_LISTEN": f"127.0.0.1:{plone_port}",
            "ZODB_DSN": make_conninfo(**conninfo_to_dict(database)),
            "CATALOG_SERVICE_URL": f"http://127.0.0.1:{service_port}",
            "PLONE_ADMIN_PASSWORD": ADMIN_PASSWORD,
        }
        plone_log = workdir / "plone.log"
        with plone_log.open("w") as log:
            plone = subprocess.Popen(["sh", str(ROOT / "deploy" / "plone" / "entrypoint.sh"), "start"],
                                     env=plone_env, cwd=instance, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        running.append(plone)
        assert wait_for(f"http://127.0.0.1:{plone_port}/ok", 200, plone, seconds=240, log=plone_log) == 200
        yield Stack(storage, database, f"http://127.0.0.1:{plone_port}/{plone_env['PLONE_SITE_ID']}", plone_port,
                    plone_env, plone_log, services)
    finally:
        for process in reversed(running):
            stop(process)
        drop_database(admin, database)
        shutil.rmtree(workdir, ignore_errors=True)


def test_site_is_created_with_the_connector_and_healthy(stack):
    assert stack.plone_env["CATALOG_SERVICE_TOKEN"] == ADMIN_TOKEN
    probe = local(stack.services["plone"]["healthcheck"]["test"][1:], stack.plone_port)
    result = subprocess.run(probe, env=stack.plone_env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    with urllib.request.urlopen(stack.site_url, timeout=60) as response:
        assert response.status == 200
    with psycopg.connect(stack.database, autocommit=True) as conn:
        catalogs = conn.execute("select name from catalog").fetchall()
    # Installing plone_connector:default registered the site's catalog with the service.
    assert catalogs == [(stack.plone_env["PLONE_SITE_ID"],)], stack.plone_log.read_text()[-4000:]
    # Running the entrypoint's site creation again (a container restart) leaves the site alone.
    again = subprocess.run(
        ["zconsole", "run", f"{stack.plone_env['PLONE_INSTANCE']}/etc/zope.conf",
         f"{stack.plone_env['PLONE_INSTANCE']}/scripts/create_site.py"],
        env=stack.plone_env, capture_output=True, text=True, timeout=300,
    )
    assert again.returncode == 0, again.stderr[-4000:]
    assert "exists; nothing to do" in again.stdout


def test_a_page_created_in_plone_reaches_the_service(stack, request):
    auth = base64.b64encode(f"admin:{ADMIN_PASSWORD}".encode()).decode()
    request = urllib.request.Request(
        stack.site_url,
        data=json.dumps({"@type": "Document", "id": "deployed", "title": "Deployed page"}).encode(),
        headers={"Accept": "application/json", "Content-Type": "application/json", "Authorization": f"Basic {auth}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 201
    with psycopg.connect(stack.database, autocommit=True) as conn:
        (catalog_id,) = conn.execute("select id from catalog").fetchone()
        paths = [row[0] for row in conn.execute(f"select path from catalog_object_{int(catalog_id)}")]
    assert any(path.endswith("/deployed") for path in paths), paths
