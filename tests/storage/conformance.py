"""Make pytest run ZODB's storage conformance mixins, and know which mixin each test came from.

ZODB 6 names most mixin tests ``test…`` (collected by pytest's unittest support) but some are
still ``check…``, which pytest does not collect: ``run_checks`` adds a ``test_<checkName>``
alias for each. ``zodb_mixin`` maps a collected test back to the ZODB mixin defining it, so the
suite can count, per mixin, how many ran (conftest.py) and fail when too few did. ZODB's doctest
files run from test functions marked with ``zodb_doctest``, counted the same way.
"""

from __future__ import annotations

SKIPPED_WITH_REASON: dict[str, str] = {}

# ZODB's race test with 64 clients opens about 130 PostgreSQL connections at once.
MANY_CLIENTS_TESTS = ("test_race_external_invalidate_vs_disconnect",)
MANY_CLIENTS_CONNECTIONS = 150


def skip_without_connections(test, dsn: str) -> None:
    """Skip a many-client test when the server cannot take that many connections (the embedded
    test server allows 300; a DATABASE_URL server may allow fewer)."""
    if test._testMethodName not in MANY_CLIENTS_TESTS:
        return
    import psycopg

    with psycopg.connect(dsn) as conn:
        allowed = int(conn.execute("show max_connections").fetchone()[0])
    if allowed < MANY_CLIENTS_CONNECTIONS:
        test.skipTest(f"opens 64 database clients at once (about 130 PostgreSQL connections); this "
                      f"server allows {allowed}")


def _alias(name: str):
    def test(self):
        getattr(self, name)()

    test.__name__ = f"test_{name}"
    test.zodb_check = name
    return test


def run_checks(cls):
    """Class decorator: alias every inherited ``check*`` method as ``test_check*``."""
    for klass in cls.__mro__:
        if not klass.__module__.startswith("ZODB.tests."):
            continue
        for name in vars(klass):
            if name.startswith("check") and callable(getattr(cls, name)):
                setattr(cls, f"test_{name}", _alias(name))
    return cls


def zodb_mixin(cls: type, test_name: str) -> str | None:
    """The ZODB test mixin that defines ``test_name`` as used by ``cls`` (None if ours)."""
    name = getattr(getattr(cls, test_name, None), "zodb_check", test_name)
    for klass in cls.__mro__:
        if name in vars(klass):
            if klass.__module__.startswith("ZODB.tests."):
                return f"{klass.__module__.rsplit('.', 1)[-1]}.{klass.__name__}"
            return None
    return None


def zodb_doctest(name: str):
    """Mark a test function that runs one of ZODB's doctest files (e.g. ``IExternalGC.test``), so
    conftest.py counts it under that name as it counts the mixins."""

    def decorate(function):
        function.zodb_doctest = name
        return function

    return decorate


def not_applicable(reason: str):
    """Replace an inherited mixin test that cannot apply to this storage mode, saying why."""
    import unittest

    def decorate(function):
        SKIPPED_WITH_REASON[function.__name__] = reason
        return unittest.skip(reason)(function)

    return decorate
