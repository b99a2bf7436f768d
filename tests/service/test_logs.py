"""Structured logs of a real service process (CATALOG_LOG_JSON): one JSON line for each failed or
slow request, with the fields logs.JsonFormatter writes (ts, level, logger, msg; route, status,
ms, catalog; exc for an error), and nothing for a request that went well and fast."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

from tests.live import start_service
from tests.service.test_api import NOW, UNRESTRICTED, entry
from tests.service.test_review_support import commit_batch, get, new_catalog, post


@pytest.fixture(scope="module")
def service(database_url):
    # Info level: a request that goes well writes nothing at any level the service is set to.
    service = start_service(database_url, extra_env={"CATALOG_LOG_JSON": "true", "CATALOG_LOG_LEVEL": "info"})
    yield service
    service.stop()


@pytest.fixture
def catalog(service):
    with service.client() as admin:
        name, token = new_catalog(admin)
    commit_batch(service, name, [entry("doc", "/plone/doc", effective=NOW, text="logged words")])
    yield name
    with service.client() as admin:
        admin.delete(f"/catalogs/{name}")


class LogTail:
    """The lines a service writes to its log from now on."""

    def __init__(self, service):
        self.path = Path(service.log_path)
        self.start = self.path.stat().st_size

    def lines(self, expected: int, timeout: float = 10.0) -> list[str]:
        """The new lines once there are ``expected`` of them (the service writes a request's line
        just after its answer), and a moment later, so that a line too many would show."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self._read()) < expected:
            time.sleep(0.05)
        time.sleep(0.3)
        return self._read()

    def _read(self) -> list[str]:
        with self.path.open("rb") as log:
            log.seek(self.start)
            return log.read().decode().splitlines()


def parse(line: str) -> dict:
    record = json.loads(line)
    assert isinstance(record, dict), line
    datetime.strptime(record["ts"], "%Y-%m-%dT%H:%M:%S")
    assert record["level"] == "warning" and record["logger"] == "catalog_service" and record["msg"], record
    assert isinstance(record["ms"], float | int) and record["ms"] >= 0, record
    return record


def test_requests_that_go_well_write_no_line(service, catalog):
    tail = LogTail(service)
    assert post(service, f"/catalogs/{catalog}/query", token=None, headers=dict(UNRESTRICTED),
                json={"query": {"SearchableText": "logged"}}).status_code == 200
    assert get(service, "/search", params={"catalog": catalog, "portal_type": "Document"}).status_code == 200
    assert get(service, f"/catalogs/{catalog}", token=None).status_code == 200
    # Answered errors of the caller are no failures of the service.
    assert get(service, "/search", params={"catalog": "no-such-catalog", "portal_type": "x"}).status_code == 404
    assert post(service, f"/search?catalog={catalog}", json={"query": {"allowedRolesAndUsers": "x"}}
                ).status_code == 403
    assert post(service, f"/catalogs/{catalog}/query", token=None, json={"query": {"sort_on": "nope"}}
                ).status_code == 400
    # None of them failed; only one slowed down past a second by a loaded machine may have a line.
    for line in tail.lines(expected=1, timeout=1.0):
        record = parse(line)
        assert record["status"] < 500 and record["ms"] > 1000, record


def test_a_failed_request_writes_one_json_line_with_its_error(service, catalog, database_url):
    # A catalog whose partition is gone behind the service's back: every request for it fails
    # inside the service (PostgreSQL: undefined table), on the search routes (the front door,
    # app.CatalogApp) and on the others (FastAPI's routing).
    with psycopg.connect(database_url) as conn:
        catalog_id = conn.execute("select id from catalog where name = %s", (catalog,)).fetchone()[0]
        conn.execute(f"drop table catalog_object_{int(catalog_id)}")
    tail = LogTail(service)
    failed = {
        "/catalogs/{name}/query": post(service, f"/catalogs/{catalog}/query", token=None,
                                       json={"query": {"portal_type": "Document"}}),
        "/search": get(service, "/search", params={"catalog": catalog, "portal_type": "Document"}),
        "/catalogs/{name}": get(service, f"/catalogs/{catalog}", token=None),
    }
    for route, response in failed.items():
        assert response.status_code == 500, (route, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["detail"] == "see the service log"
    lines = tail.lines(expected=len(failed))
    assert len(lines) == len(failed), lines
    records = [parse(line) for line in lines]
    assert sorted(record["route"] for record in records) == sorted(failed)
    for record in records:
        assert record["status"] == 500 and record["catalog"] == catalog, record
        assert "Traceback" in record["exc"] and "catalog_object_" in record["exc"], record


def test_a_slow_request_writes_one_json_line(service, catalog):
    def slow_body():
        # The body arrives in two parts, more than a second apart: the request takes that long.
        yield b'{"query": {"SearchableText": '
        time.sleep(1.2)
        yield b'"logged"}}'

    tail = LogTail(service)
    response = post(service, f"/catalogs/{catalog}/query", token=None, headers={**UNRESTRICTED,
                                                                             "Content-Type": "application/json"},
                    content=slow_body())
    assert response.status_code == 200 and response.json()["items_total"] == 1
    lines = tail.lines(expected=1)
    assert len(lines) == 1, lines
    record = parse(lines[0])
    assert record["route"] == "/catalogs/{name}/query" and record["status"] == 200, record
    assert record["catalog"] == catalog and record["ms"] >= 1000 and "exc" not in record, record
