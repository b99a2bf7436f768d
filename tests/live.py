"""Run the real service (uvicorn in a subprocess) for tests that talk HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveService:
    url: str
    admin_token: str
    process: subprocess.Popen
    database_url: str
    log_path: str = ""  # the service's stderr

    def client(self, token: str | None = None, **kw) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.admin_token}"} if token is not False else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, **kw)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_service(database_url: str, admin_token: str = "test-admin-token", extra_env: dict | None = None,
                  port: int | None = None) -> LiveService:
    port = port or free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "CATALOG_ADMIN_TOKEN": admin_token,
           "CATALOG_LOG_LEVEL": "warning", **(extra_env or {})}
    # The log goes to a file: a pipe nobody reads fills up and stalls the server.
    log = tempfile.NamedTemporaryFile(prefix="catalog-service-", suffix=".log", delete=False)  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, "-m", "catalog_service.cli", "serve", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            with open(log.name, errors="replace") as text:
                raise RuntimeError("service exited: " + text.read()[-3000:])
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return LiveService(url=url, admin_token=admin_token, process=process, database_url=database_url,
                                   log_path=log.name)
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("service did not become ready in 60 s")
