"""The processes the images and compose start, run here without containers.

The command lines are read from docker-compose.yml and the Dockerfiles (not repeated here), so
when they change this test runs the new ones: `catalog-service migrate` (the migrate job), then
`catalog-service serve ...` (each service replica) against a real PostgreSQL, probed with the
same healthcheck commands Docker would run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.deploy.compose import ROOT, env_of, load_compose
from tests.deploy.dockerfile import parse
from tests.pg import create_database, drop_database

BIN = Path(sys.executable).parent

needs_cli = pytest.mark.skipif(
    importlib.util.find_spec("catalog_service.cli") is None,
    reason="catalog_service.cli (the catalog-service command) is not written yet",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def local(argv: list[str], port: int) -> list[str]:
    """The container's command line, run from this venv and on a free port."""
    argv = list(argv)
    if (BIN / argv[0]).exists():
        argv[0] = str(BIN / argv[0])
    if "--port" in argv:
        argv[argv.index("--port") + 1] = str(port)
    return [arg.replace("127.0.0.1:8080/", f"127.0.0.1:{port}/") for arg in argv]


def process_env(service: dict, database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_") and k != "DATABASE_URL"}
    env.update(env_of(service))
    env["DATABASE_URL"] = database_url
    # The stack's replica is a container; here the primary is all there is (test_replication.py
    # covers a real streaming replica).
    env["CATALOG_REPLICA_URLS"] = "[]"
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def wait_for(url: str, want: int, server: subprocess.Popen, seconds: float = 60.0, log: Path | None = None) -> int:
    deadline = time.monotonic() + seconds
    code = 0
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"server exited with {server.returncode}\n{log.read_text()[-4000:] if log else ''}")
        code = status(url)
        if code == want:
            return code
        time.sleep(0.25)
    return code


@pytest.fixture
def fresh_database():
    dsn, admin = create_database("deploy")
    yield dsn
    drop_database(admin, dsn)


def run_probe(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)


def run_job(argv: list[str], env: dict[str, str], cwd: Path) -> None:
    result = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_cli
def test_migrate_then_serve_as_compose_starts_them(fresh_database, tmp_path):
    services = load_compose({})["services"]
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    # The migrate job, as compose runs it before any replica; twice, as two `up`s would.
    migrate = local(services["migrate"]["command"], port)
    run_job(migrate, process_env(services["migrate"], fresh_database), tmp_path)
    run_job(migrate, process_env(services["migrate"], fresh_database), tmp_path)

    serve_env = process_env(services["catalog"], fresh_database)
    assert serve_env["CATALOG_MIGRATE_ON_START"] == "false"
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            local(services["catalog"]["command"], port),
            env=serve_env,
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            assert wait_for(f"{base}/healthz", 200, server) == 200, log_path.read_text()
            assert wait_for(f"{base}/readyz", 200, server, seconds=30) == 200, log_path.read_text()
            with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
                assert response.status == 200
                assert b"# TYPE" in response.read()

            # The probes Docker runs: the image's HEALTHCHECK and compose's healthcheck.
            final = [i for i in parse(ROOT / "deploy" / "service.Dockerfile") if i.keyword == "HEALTHCHECK"]
            image_probe = final[-1].exec_form()
            compose_probe = services["catalog"]["healthcheck"]["test"][1:]
            for probe in (image_probe, compose_probe):
                result = run_probe(local(probe, port), serve_env)
                assert result.returncode == 0, result.stderr
        finally:
            # Docker stops a container with SIGTERM; exec-form CMD makes the server receive it.
            server.send_signal(signal.SIGTERM)
            try:
                code = server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
                pytest.fail("the server did not stop on SIGTERM within 30 s")
    assert code in (0, -signal.SIGTERM), log_path.read_text()
    # Every worker is gone with it (no orphan holding the port).
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0


@needs_cli
def test_serve_leaves_migrations_to_the_job_when_told(fresh_database, tmp_path):
    services = load_compose({})["services"]
    port = free_port()
    serve_env = process_env(services["catalog"], fresh_database)
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(local(services["catalog"]["command"], port), env=serve_env, cwd=tmp_path,
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            base = f"http://127.0.0.1:{port}"
            assert wait_for(f"{base}/healthz", 200, server, log=log_path) == 200
            # Up, but its database is not migrated: not ready for traffic until the job has run.
            assert status(f"{base}/readyz") == 503
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)


def test_healthcheck_probe_fails_when_nothing_listens():
    # The probe must be able to fail, or a dead replica would look healthy.
    services = load_compose({})["services"]
    probe = local(services["catalog"]["healthcheck"]["test"][1:], free_port())
    result = run_probe(probe, dict(os.environ))
    assert result.returncode != 0


def test_settings_accept_the_replica_list_format():
    # CATALOG_REPLICA_URLS is a JSON list, as pydantic-settings reads list fields.
    from catalog_service.settings import Settings

    urls = ["postgresql://u:p@replica-1/catalog", "postgresql://u:p@replica-2/catalog"]
    os.environ["CATALOG_REPLICA_URLS"] = json.dumps(urls)
    try:
        assert Settings(_env_file=None).replica_urls == urls
    finally:
        del os.environ["CATALOG_REPLICA_URLS"]
