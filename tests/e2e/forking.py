"""Plone work in forked children of the test process.

A fork inherits the loaded Zope and Plone (no second start-up). The child must not touch what
the parent's connections hold: it opens its own database and its own HTTP client. It reports
through a pipe and never returns into pytest.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterator

import transaction
import ZODB
from plone.app.testing import login
from plone.testing import zope
from zope.component.hooks import setSite

from plone_connector.catalog.client import reset_client
from plone_connector.storage import JsonbStorage


def start(child: Callable[[int], None]) -> tuple[int, int]:
    """Run ``child(report_fd)`` in a forked process; return (pid, read end of its report pipe).
    The child exits 0 when ``child`` returns, 3 when it raises (traceback on stderr)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.close(read_fd)
            child(write_fd)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def finish(pid: int, read_fd: int, timeout: float = 120) -> tuple[int, str]:
    """Wait for the child; return (its wait status, its report). The report is read after the
    child exited, so keep it short (a pipe holds 64 kB). A child still running after ``timeout``
    seconds (a lock a fork inherited, a commit that never returns) is killed and the test fails,
    rather than waiting for pytest's own timeout."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_fd)
            raise AssertionError(f"forked child {pid} still running after {timeout} s; killed")
        time.sleep(0.05)
    with os.fdopen(read_fd) as report:
        return status, report.read()


def kill_at_tpc_finish(cls: type, report_fd: int, report: Callable[[object], str]) -> None:
    """In the child: once every data manager of the transaction has voted, the first call of
    ``cls.tpc_finish`` writes ``report(instance)`` to the parent and kills the process (SIGKILL:
    nothing cleans up, as when a Plone process is killed)."""

    def die(self, *args, **kwargs) -> None:
        os.write(report_fd, report(self).encode())
        os.kill(os.getpid(), signal.SIGKILL)

    cls.tpc_finish = die


def killed(child: Callable[[int], None]) -> str:
    """Run ``child(report_fd)`` in a forked process that must die by SIGKILL; return its report."""
    status, report = finish(*start(child))
    # Exit status 0 or 3 would mean the kill point was never reached.
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"child status {status}"
    return report


def own_connections(dsn: str) -> ZODB.DB:
    """In the child: a new HTTP client and a new database on the same tables."""
    reset_client()
    transaction.begin()
    return ZODB.DB(JsonbStorage(dsn, name="forked"))


@contextlib.contextmanager
def site_as_manager(db: ZODB.DB, name: str) -> Iterator:
    """The site ``name`` in a new connection of ``db``, logged in as manager. Commit inside: the
    error of plone.testing's own commit at the end of ``zopeApp`` would be lost."""
    with zope.zopeApp(db=db) as app:
        site = app[name]
        setSite(site)
        login(site, "manager")
        try:
            yield site
        finally:
            setSite(None)
