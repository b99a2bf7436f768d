"""The OpenAPI document tells the truth: schemathesis generates requests from it for every
operation and sends them to the running service (a uvicorn process on a real PostgreSQL),
anonymously and with the admin token. No answer may be a 5xx, and every answer must be one the
document lists for its operation, of its media type and schema (errors included: problem details).

Bounded: ``OPENAPI_FUZZ_EXAMPLES`` examples per operation and credential (default 6), about three
minutes in all on two cores.
"""

from __future__ import annotations

import os

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.service.test_api import entry
from tests.service.test_review_support import commit_batch, drained_service, new_catalog

EXAMPLES = int(os.environ.get("OPENAPI_FUZZ_EXAMPLES", "6"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def service(database_url):
    with drained_service(database_url) as service:
        yield service


@pytest.fixture(scope="module")
def catalog(service):
    """A catalog with a few objects, that most generated requests name (random names find none)."""
    with service.client() as admin:
        name, _ = new_catalog(admin)
    commit_batch(service, name, [entry("a", "/plone/a", text="hello world", subjects=["x"]),
                                 entry("b", "/plone/a/b", text="hello there")])
    return name


def _document() -> dict:
    """The service's OpenAPI document, as its application builds it (no database needed); the
    live service must serve the same (test_the_document_lists_problem_details_for_errors)."""
    from catalog_service.app import create_app
    from catalog_service.settings import Settings

    return create_app(Settings()).openapi()


schema = schemathesis.openapi.from_dict(_document())


def _ensure(service, name: str) -> None:
    """The catalog again if a generated request dropped it (DELETE is one of the operations)."""
    with service.client() as admin:
        if admin.get(f"/catalogs/{name}").status_code == 404:
            from catalog_schemas.api import CatalogCreate
            from tests.service.test_api import INDEXES

            spec = CatalogCreate(id=name, indexes=INDEXES, metadata=["Title"])
            assert admin.post("/catalogs", json=spec.model_dump()).status_code == 201


def _call(case, service, catalog, token: str | None) -> None:
    for parameter in ("name", "catalog"):
        if parameter in (case.path_parameters or {}):
            _ensure(service, catalog)
            case.path_parameters[parameter] = catalog
    if case.query and "catalog" in case.query:
        case.query["catalog"] = catalog
    headers = dict(case.headers or {})
    headers.pop("authorization", None)
    if token:
        headers["authorization"] = f"Bearer {token}"
    case.headers = headers
    case.call_and_validate(base_url=service.url, checks=CHECKS, timeout=30)


FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


@schema.parametrize()
@FUZZ
def test_anonymous_answers_are_documented_and_no_5xx(case, service, catalog):
    _call(case, service, catalog, None)


@schema.parametrize()
@FUZZ
def test_admin_answers_are_documented_and_no_5xx(case, service, catalog):
    _call(case, service, catalog, service.admin_token)


def test_the_document_lists_problem_details_for_errors(service):
    document = httpx.get(service.url + "/openapi.json").json()
    assert document == _document()
    problem = document["components"]["schemas"]["Problem"]
    assert {"type", "title", "status", "detail", "instance", "errors"} <= set(problem["properties"])
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")):
                    assert list(response["content"]) == ["application/problem+json"], (method, path, status)
            if path.startswith("/catalogs/") or path == "/search":
                assert "503" in operation["responses"], (method, path)
    limits = document["components"]["schemas"]["SearchRequest"]["properties"]["b_size"]
    assert limits["anyOf"][0]["maximum"] == 5000  # the service's CATALOG_MAX_B_SIZE
