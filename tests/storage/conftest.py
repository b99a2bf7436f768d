"""Fixtures of the storage tests: a schema per storage mode in the session database.

Also counts the ZODB conformance tests that passed, per ZODB test mixin, and prints the counts
at the end of the run, so the log shows how many ran (test_zz_conformance_count.py asserts them).
"""

from __future__ import annotations

import collections
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from tests.storage.conformance import zodb_mixin


def dsn_with_schema(dsn: str, schema: str) -> str:
    parts = urlsplit(dsn)
    query = f"{parts.query}&" if parts.query else ""
    return urlunsplit(parts._replace(query=f"{query}options=-csearch_path%3D{schema}"))


@pytest.fixture(scope="session")
def storage_dsn(database_url):
    """DSN of a schema holding a history-free storage (tests empty it with ``cleanup()``)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("create schema if not exists zodb_hf")
    return dsn_with_schema(database_url, "zodb_hf")


@pytest.fixture
def storage(storage_dsn):
    """An empty history-free JsonbStorage (test files with other needs define their own)."""
    from plone_connector.storage import JsonbStorage

    storage = JsonbStorage(storage_dsn)
    storage.cleanup()
    yield storage
    storage.close()


@pytest.fixture(scope="session")
def hp_storage_dsn(database_url):
    """DSN of a schema holding a history-preserving storage."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("create schema if not exists zodb_hp")
    return dsn_with_schema(database_url, "zodb_hp")


@pytest.fixture
def hp_storage(hp_storage_dsn):
    """An empty history-preserving JsonbStorage."""
    from plone_connector.storage import JsonbStorage

    storage = JsonbStorage(hp_storage_dsn, history_preserving=True)
    storage.cleanup()
    yield storage
    storage.close()


@pytest.fixture(scope="session")
def hp_destination_dsn(database_url):
    """A second history-preserving storage, the destination of copy (recovery) tests."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("create schema if not exists zodb_hp_dst")
    return dsn_with_schema(database_url, "zodb_hp_dst")


@pytest.fixture(scope="session")
def hf_destination_dsn(database_url):
    """A second history-free storage, the destination of copy (recovery) tests."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("create schema if not exists zodb_hf_dst")
    return dsn_with_schema(database_url, "zodb_hf_dst")


@pytest.fixture
def fresh_dsn(database_url):
    """DSN of a new, empty schema, for tests that need their own tables."""
    import uuid

    schema = f"zodb_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"create schema {schema}")
    yield dsn_with_schema(database_url, schema)
    with psycopg.connect(database_url, autocommit=True) as conn:
        # A storage a failed test left open holds locks on the schema's tables, and the drop would
        # wait for it forever: end those sessions first.
        conn.execute(
            """select pg_terminate_backend(l.pid) from pg_locks l
               join pg_class c on c.oid = l.relation
               join pg_namespace n on n.oid = c.relnamespace
               where n.nspname = %s and l.pid <> pg_backend_pid()""",
            (schema,),
        )
        conn.execute(f"drop schema {schema} cascade")


PASSED: collections.Counter = collections.Counter()
FAILED: collections.Counter = collections.Counter()


def pytest_runtest_logreport(report):
    mixin = getattr(report, "zodb_mixin", None)
    if mixin is None:
        return
    if report.when == "call" and report.passed:
        PASSED[mixin] += 1
    elif report.failed:
        FAILED[mixin] += 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    cls = getattr(item, "cls", None)
    if cls is not None:
        report.zodb_mixin = zodb_mixin(cls, item.name)
    else:
        report.zodb_mixin = getattr(getattr(item, "function", None), "zodb_doctest", None)


def pytest_terminal_summary(terminalreporter):
    if not PASSED and not FAILED:
        return
    terminalreporter.section("ZODB storage conformance mixins and doctests run against JsonbStorage")
    for mixin in sorted(set(PASSED) | set(FAILED)):
        terminalreporter.write_line(f"{mixin}: {PASSED[mixin]} passed, {FAILED[mixin]} failed")
