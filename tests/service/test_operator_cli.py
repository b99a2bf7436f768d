"""The command line in an operator's first hour: one clear line and a non-zero exit for what the
operator can fix, nothing printed as if the service ran before it listens, the embedded
PostgreSQL stopped with the service, help that names options, defaults and environment."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import httpx
import psycopg
import pytest

from tests.live import free_port


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CATALOG_DATABASE_URL")
           and not k.startswith("CATALOG_")}
    env.update(extra)
    return env


def cli(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "catalog_service.cli", *args], env=env or _env(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("url, reason", [
    ("postgresql://127.0.0.1:1/x", "Connect call failed"),
    ("postgresql://127.0.0.1:5432/no_such_database_anywhere", 'database "no_such_database_anywhere" does not exist'),
    ("postgresql://nobody_here:s3cret@127.0.0.1:5432/postgres", "nobody_here"),
    ("no url at all", "invalid DSN"),
])
@pytest.mark.parametrize("command", [["migrate"], ["serve", "--port", "0"], ["stats"]])
def test_wrong_database_url_is_one_line(url, reason, command):
    result = cli(*command, env=_env(DATABASE_URL=url))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("catalog-service: cannot use the database at "), result.stderr
    assert reason in lines[0]
    assert "s3cret" not in lines[0]  # the password is not shown
    assert "admin token" not in result.stderr and result.stdout == ""


def test_catalog_database_url_is_honoured(database_url):
    """The name docker-compose.yml uses; the embedded server is not started in its place."""
    name = "clidb-" + uuid.uuid4().hex[:8]
    result = cli("catalog", "create", name, env=_env(CATALOG_DATABASE_URL=database_url,
                                                     CATALOG_EMBEDDED_PGDATA="/nonexistent/never"))
    assert result.returncode == 0, result.stderr
    with psycopg.connect(database_url) as conn:
        assert conn.execute("select count(*) from catalog where name = %s", (name,)).fetchone() == (1,)
    # Both names set to different servers: refused rather than one silently chosen.
    result = cli("migrate", env=_env(DATABASE_URL=database_url, CATALOG_DATABASE_URL="postgresql://elsewhere/x"))
    assert result.returncode == 2
    assert result.stderr.strip() == ("catalog-service: DATABASE_URL and CATALOG_DATABASE_URL are both set "
                                     "and differ; set one of them")


def test_port_in_use_is_one_line_and_prints_nothing_as_if_it_worked(database_url):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli("serve", "--port", str(port), env=_env(DATABASE_URL=database_url))
    assert result.returncode == 1
    assert result.stderr.strip() == f"catalog-service: cannot listen on 127.0.0.1:{port}: Address already in use"
    assert result.stdout == ""


def test_serve_prints_its_address_once_it_listens(database_url):
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "catalog_service.cli", "serve", "--port", str(port)],
                               env=_env(DATABASE_URL=database_url, CATALOG_LOG_LEVEL="warning"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stderr.readline()
        while "catalog service on" not in line:
            assert line, process.stderr.read()
            line = process.stderr.readline()
        # Bound before the line was written: a connection is accepted (and answered once started).
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) in (0, 128 + signal.SIGTERM)


def test_help_describes_options_defaults_and_environment():
    top = cli("--help")
    assert top.returncode == 0
    for command in ("serve", "migrate", "demo", "stats", "indexes", "catalog", "embedded"):
        assert command in top.stdout
    serve = " ".join(cli("serve", "--help").stdout.split())  # argparse wraps lines
    assert "--port PORT" in serve and "env CATALOG_PORT, default 8080" in serve
    assert "env CATALOG_HOST, default 127.0.0.1" in serve
    # Every setting, with its environment variable, default and what it does.
    from catalog_service.settings import Settings

    for name in Settings.model_fields:
        if name != "database_url":
            assert f"CATALOG_{name.upper()} (default " in serve, name
    assert "DATABASE_URL or CATALOG_DATABASE_URL" in serve
    assert "Seconds a statement may run before PostgreSQL cancels it." in serve
    assert "default 2000" in cli("demo", "--help").stdout
    assert "default 3600" in cli("catalog", "rotate-token", "--help").stdout
    for args in (["migrate"], ["stats"], ["indexes"], ["catalog"], ["catalog", "create"], ["embedded"]):
        result = cli(*args, "--help")
        assert result.returncode == 0 and "usage: catalog-service" in result.stdout
        # A description beyond the usage line.
        assert len([line for line in result.stdout.splitlines() if line.strip()]) > 3, args


def test_catalog_create_and_rotate_token_from_the_command_line(live_service):
    env = _env(DATABASE_URL=live_service.database_url)
    name = "cli-" + uuid.uuid4().hex[:8]
    created = cli("catalog", "create", name, "--title", "From the CLI", env=env)
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert "CATALOG_SERVICE_TOKEN" in created.stderr and token not in created.stderr
    try:
        with live_service.client(token=token) as connector:
            assert connector.get(f"/catalogs/{name}").json()["title"] == "From the CLI"
        rotated = cli("catalog", "rotate-token", name, "--grace", "0", env=env)
        assert rotated.returncode == 0, rotated.stderr
        new = rotated.stdout.strip()
        assert new and new != token and "is no longer valid" in rotated.stderr
        assert httpx.get(f"{live_service.url}/catalogs/{name}",
                         headers={"Authorization": f"Bearer {token}"}).status_code == 401
        assert httpx.get(f"{live_service.url}/catalogs/{name}",
                         headers={"Authorization": f"Bearer {new}"}).status_code == 200
        again = cli("catalog", "create", name, env=env)
        assert again.returncode == 1 and again.stderr.strip() == f"catalog-service: cannot create catalog {name!r}: " \
                                                                 f"catalog {name!r} exists"
        missing = cli("catalog", "rotate-token", "no-such-catalog", env=env)
        assert missing.returncode == 1 and missing.stderr.strip() == "catalog-service: no catalog 'no-such-catalog'"
    finally:
        with live_service.client() as admin:
            admin.delete(f"/catalogs/{name}")


def _wait_ready(process, url, deadline=240):
    end = time.monotonic() + deadline
    while True:
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < end, "serve did not become ready"
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.3)


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_serve_stops_its_embedded_postgresql(tmp_path, how):
    from catalog_service import embedded

    pgdata = tmp_path / "pg"
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "catalog_service.cli", "serve", "--port", str(port)],
                               env=_env(CATALOG_EMBEDDED_PGDATA=str(pgdata), CATALOG_LOG_LEVEL="warning"),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_ready(process, f"http://127.0.0.1:{port}")
        assert embedded.running(pgdata) is not None
        process.send_signal(how)
        output = process.communicate(timeout=60)[0]
        # Uvicorn raises the signal again once it has shut down: 130 (SIGINT) or 143 (SIGTERM).
        assert process.returncode in (0, 128 + how), output
        assert embedded.running(pgdata) is None, output
        assert f"embedded PostgreSQL in {pgdata.resolve()} stopped" in output
    finally:
        if process.poll() is None:
            process.kill()
        embedded.stop(pgdata)
