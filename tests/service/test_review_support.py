"""Helpers for the review tests (tests/service/test_review_*.py); holds no tests itself.

The review tests provoke errors on purpose. tests/live.py pipes the service's stderr and never
reads it, so after about 64 KiB of logged tracebacks the service blocks on its next log write and
stops answering every request. The review tests therefore run their own service process and drain
its stderr, so that they cannot stall the shared ``live_service`` of the other tests.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager

import httpx

from catalog_schemas.api import CatalogCreate
from tests.live import LiveService, start_service
from tests.service.test_api import INDEXES, UNRESTRICTED


@contextmanager
def drained_service(database_url: str):
    """A private service on the session's database (its log goes to a file, see tests/live.py)."""
    service: LiveService = start_service(database_url)
    try:
        yield service
    finally:
        service.stop()


def new_catalog(admin: httpx.Client, indexes=INDEXES, metadata=("Title",)) -> tuple[str, str]:
    """Create a fresh catalog; return (name, connector token)."""
    name = "r-" + uuid.uuid4().hex[:10]
    spec = CatalogCreate(id=name, indexes=list(indexes), metadata=list(metadata))
    response = admin.post("/catalogs", json=spec.model_dump())
    assert response.status_code == 201, response.text
    return name, response.json()["token"]


def _headers(service: LiveService, token: str | None | bool, given: dict | None) -> dict:
    """The request's headers: a copy of the caller's (a shared dict such as test_api.UNRESTRICTED
    must never get another test's Authorization), with the token's (None: the admin's)."""
    headers = dict(given or {})
    if token is not False:
        headers["Authorization"] = f"Bearer {token or service.admin_token}"
    return headers


def post(service: LiveService, url: str, token: str | None | bool = False, **kw) -> httpx.Response:
    """One request on a fresh connection: a 500 closes the connection it was sent on."""
    return httpx.post(service.url + url, headers=_headers(service, token, kw.pop("headers", None)), timeout=30, **kw)


def get(service: LiveService, url: str, token: str | None | bool = False, **kw) -> httpx.Response:
    return httpx.get(service.url + url, headers=_headers(service, token, kw.pop("headers", None)), timeout=30, **kw)


def uids_of(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["uid"] for item in response.json()["items"]]


def unrestricted_query(service: LiveService, name: str, query: dict, **body) -> list[str]:
    return uids_of(post(service, f"/catalogs/{name}/query", token=None, headers=dict(UNRESTRICTED),
                        json={"query": query, **body}))


def commit_batch(service: LiveService, name: str, entries: list[dict], batch_id: str | None = None,
                 **body) -> dict:
    response = post(service, f"/catalogs/{name}/batches", token=None,
                    json={"batch_id": batch_id or uuid.uuid4().hex, "entries": entries, **body})
    assert response.status_code == 200, response.text
    return response.json()
