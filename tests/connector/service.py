"""The catalog service as a subprocess the connector tests can start, stop and kill."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServiceProcess:
    def __init__(self, database_url: str):
        self.database_url = database_url
        self.port = free_port()
        self.admin_token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        env = dict(os.environ)
        env.update({
            "DATABASE_URL": self.database_url,
            "CATALOG_ADMIN_TOKEN": self.admin_token,
            "CATALOG_LOG_LEVEL": "warning",
        })
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "catalog_service.app:create_app", "--factory",
             "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"],
            env=env,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"catalog service exited with {self.process.returncode}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError("catalog service did not become ready")

    def stop(self, kill: bool = False) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    @contextlib.contextmanager
    def killed(self):
        """The service killed (as a crash kills it) for the block, and started again after it."""
        self.stop(kill=True)
        try:
            yield
        finally:
            self.start()
