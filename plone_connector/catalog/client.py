"""The HTTP client of the catalog service: one keep-alive pool per process, timeouts, retries.

Only idempotent calls are retried: queries, reads, staging (the same batch id replaces the staged
batch), appending to a staged batch (an entry replaces the staged one of its uid), commit and abort
(both idempotent by contract). Creating a catalog is not retried. They are retried on connection
errors and on 502, 503 (the service's answer while its database is away) and 504, with pauses
that grow to a second, until the call's timeout is spent (or ``retries`` attempts, if set). The
timeout bounds a whole call, retries included: a page waits at most that long for one request.

Some requests are sent in the background (``in_background``: staging while the ZODB storages store
and vote), by one thread per process in the order they were handed over. Every other request
waits for those first (``settle``), so a process's requests reach the service in the order its
transactions made them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import Any
from urllib.parse import quote

import httpx
import orjson

from catalog_schemas.api import (
    Batch,
    BatchAppend,
    BatchResult,
    CatalogCreate,
    CatalogInfo,
    CatalogSettings,
    SchemaUpdate,
    SearchRequest,
    SearchResult,
    StagedBatches,
    TextIndexSize,
    UniqueValues,
)

from . import stats
from .errors import (
    CatalogNotFound,
    CatalogServiceError,
    ServiceRejected,
    ServiceTimeout,
    ServiceUnavailable,
)
from .settings import ConnectorSettings

logger = logging.getLogger("plone_connector.catalog")

_RETRY_STATUS = {502, 503, 504}

_sender: ThreadPoolExecutor | None = None
_in_flight: set[Future] = set()
_sender_lock = threading.Lock()
_sender_thread = threading.local()


def _after_fork_in_child() -> None:
    """A forked process has none of its parent's threads: start again with no background thread
    and nothing in flight (the parent's requests are the parent's)."""
    global _sender, _in_flight, _sender_lock
    _sender, _in_flight, _sender_lock = None, set(), threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _mark_sender_thread() -> None:
    _sender_thread.active = True


def in_background(fn, *args) -> Future:
    """Run ``fn(*args)`` on the process's background thread, after everything handed over before."""
    global _sender
    with _sender_lock:
        if _sender is None:
            _sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="catalog-batches",
                                         initializer=_mark_sender_thread)
        future = _sender.submit(fn, *args)
        _in_flight.add(future)
    future.add_done_callback(_answered)
    return future


def _answered(future: Future) -> None:
    with _sender_lock:
        _in_flight.discard(future)


def settle() -> None:
    """Wait until every request handed to the background thread has been answered (or failed)."""
    if getattr(_sender_thread, "active", False):
        return  # the background thread itself: its own requests are in order already
    with _sender_lock:
        pending = list(_in_flight)
    if pending:
        wait_for(pending)


class CatalogClient:
    def __init__(self, settings: ConnectorSettings, transport: httpx.BaseTransport | None = None):
        self.settings = settings
        self.requests_sent = 0
        self._http = httpx.Client(
            base_url=settings.url,
            timeout=httpx.Timeout(settings.timeout, connect=settings.connect_timeout),
            limits=httpx.Limits(
                max_connections=settings.pool_size, max_keepalive_connections=settings.pool_size
            ),
            headers={"Authorization": f"Bearer {settings.token}"} if settings.token else {},
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    # -- plumbing ---------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict | None = None,
        headers: dict | None = None,
        idempotent: bool = True,
        timeout: float | None = None,
    ) -> Any:
        settle()
        content = None
        send_headers = dict(headers or {})
        if body is not None:
            content = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
            send_headers["Content-Type"] = "application/json"
        if not idempotent:
            attempts = 1
        else:
            attempts = self.settings.retries if self.settings.retries > 0 else sys.maxsize
        timeout = self.settings.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        retry_after: float | None = None
        for attempt in range(attempts):
            if attempt:
                pause = _pause(attempt, retry_after)
                if time.monotonic() + pause >= deadline:
                    break
                time.sleep(pause)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                self.requests_sent += 1
                stats.request_sent()
                response = self._http.request(
                    method, path, content=content, params=params, headers=send_headers,
                    timeout=httpx.Timeout(remaining, connect=min(self.settings.connect_timeout, remaining)),
                )
            except httpx.TransportError as exc:
                last_error, retry_after = exc, None
                logger.warning("catalog service %s %s failed (%s), attempt %d", method, path, exc, attempt + 1)
                continue
            if response.status_code in _RETRY_STATUS:
                last_error = _problem(response, method, path)
                retry_after = _retry_after(response)
                if attempts > 1:
                    logger.info("catalog service %s %s answered %d, attempt %d", method, path,
                                response.status_code, attempt + 1)
                continue
            if response.status_code >= 400:
                raise _problem(response, method, path)
            if response.status_code == 204 or not response.content:
                return None
            return _decode(response.content)
        if isinstance(last_error, httpx.TimeoutException):
            raise ServiceTimeout(
                f"The catalog service at {self.settings.url} did not answer {method} {path} "
                f"within {timeout:g} s"
            ) from last_error
        raise ServiceUnavailable(
            f"The catalog service at {self.settings.url} is not reachable: {last_error}"
        ) from last_error

    @staticmethod
    def _catalog_path(catalog_id: str, *rest: str) -> str:
        return "/".join(["/catalogs", quote(catalog_id, safe=""), *(quote(r, safe="") for r in rest)])

    # -- catalogs ---------------------------------------------------------------------------

    def create_catalog(self, spec: CatalogCreate) -> dict:
        return self._send("POST", "/catalogs", body=spec.model_dump(), idempotent=False)

    def get_catalog(self, catalog_id: str) -> CatalogInfo:
        return CatalogInfo.model_validate(self._send("GET", self._catalog_path(catalog_id)))

    def update_schema(self, catalog_id: str, update: SchemaUpdate) -> CatalogInfo:
        data = self._send("PATCH", self._catalog_path(catalog_id, "schema"), body=update.model_dump())
        return CatalogInfo.model_validate(data)

    def get_settings(self, catalog_id: str) -> CatalogSettings:
        return CatalogSettings.model_validate(self._send("GET", self._catalog_path(catalog_id, "settings")))

    def update_settings(self, catalog_id: str, changes: dict) -> CatalogSettings:
        """Change the settings ``changes`` names (None resets one to its default)."""
        data = self._send("PATCH", self._catalog_path(catalog_id, "settings"), body=changes)
        return CatalogSettings.model_validate(data)

    def drop_catalog(self, catalog_id: str) -> None:
        self._send("DELETE", self._catalog_path(catalog_id))

    def mint_token(self, catalog_id: str, principals: list[str], ttl: int, show_inactive: bool = False) -> dict:
        """A signed token for a frontend acting for the user with ``principals`` (``{"token",
        "ttl"}``); signed with the catalog's token, so it outlives a rotation by its grace period."""
        return self._send("POST", self._catalog_path(catalog_id, "tokens"),
                          body={"principals": principals, "ttl": ttl, "show_inactive": show_inactive})

    # -- batches ----------------------------------------------------------------------------

    def stage_batch(self, catalog_id: str, batch: Batch) -> BatchResult:
        data = self._send(
            "POST",
            self._catalog_path(catalog_id, "batches"),
            body=batch.model_dump(exclude_none=True),
            params={"stage": "true"},
        )
        return BatchResult.model_validate(data)

    def append_batch(self, catalog_id: str, batch_id: str, append: BatchAppend) -> BatchResult:
        """Add entries to a staged batch; each replaces the batch's entry for its uid."""
        data = self._send("POST", self._catalog_path(catalog_id, "batches", batch_id, "append"),
                          body=append.model_dump(exclude_none=True))
        return BatchResult.model_validate(data)

    def apply_batch(self, catalog_id: str, batch: Batch) -> BatchResult:
        """Apply and commit at once (repairs, tools outside a ZODB transaction)."""
        data = self._send(
            "POST", self._catalog_path(catalog_id, "batches"), body=batch.model_dump(exclude_none=True)
        )
        return BatchResult.model_validate(data)

    def commit_batch(self, catalog_id: str, batch_id: str, timeout: float | None = None) -> BatchResult:
        """``timeout``: seconds instead of the settings' (a batch sent ahead in chunks: a rebuild)."""
        data = self._send("POST", self._catalog_path(catalog_id, "batches", batch_id, "commit"), timeout=timeout)
        return BatchResult.model_validate(data)

    def abort_batch(self, catalog_id: str, batch_id: str) -> None:
        self._send("POST", self._catalog_path(catalog_id, "batches", batch_id, "abort"))

    def staged_batches(self, catalog_id: str, older_than: float, limit: int = 100) -> list[str]:
        """Ids of the catalog's batches staged more than ``older_than`` seconds ago, oldest first."""
        data = self._send("GET", self._catalog_path(catalog_id, "batches", "staged"),
                          params={"older_than": older_than, "limit": limit})
        return [batch.batch_id for batch in StagedBatches.model_validate(data).batches]

    def declare_resolver(self, catalog_id: str, by: str = "client") -> None:
        """Tell the service who resolves the catalog's batches a crash left staged."""
        self._send("PUT", self._catalog_path(catalog_id, "batches", "resolver"), body={"by": by})

    # -- queries ----------------------------------------------------------------------------

    def search(
        self,
        catalog_id: str,
        request: SearchRequest,
        principals: list[str] | None,
        unrestricted: bool = False,
    ) -> SearchResult:
        headers = {}
        if unrestricted:
            headers["X-Catalog-Unrestricted"] = "1"
        elif principals is not None:
            headers["X-Catalog-Principals"] = json.dumps(principals)
        data = self._send(
            "POST",
            self._catalog_path(catalog_id, "query"),
            body=request.model_dump(exclude_none=True),
            headers=headers,
        )
        # Not validated field by field: the service built it from the same model, and checking
        # every item of a page (a dict per brain) cost more than decoding it.
        return SearchResult.model_construct(**data)

    def unique_values(self, catalog_id: str, index: str, batch_ids=(), lengths: bool = False,
                      attribute: str | None = None) -> UniqueValues:
        """The index's distinct values, seeing the staged ``batch_ids``; with ``lengths``, the
        number of objects per value and in all; ``attribute``: a DateRangeIndex's since or until."""
        params = {"batch_id": list(batch_ids)}
        if lengths:
            params["lengths"] = "true"
        if attribute is not None:
            params["attribute"] = attribute
        data = self._send("GET", self._catalog_path(catalog_id, "unique", index), params=params)
        return UniqueValues.model_validate(data)

    def text_index_size(self, catalog_id: str, index: str, batch_ids=()) -> TextIndexSize:
        """A ZCTextIndex's distinct words and documents, seeing the staged ``batch_ids``."""
        data = self._send("GET", self._catalog_path(catalog_id, "words", index),
                          params={"batch_id": list(batch_ids)})
        return TextIndexSize.model_validate(data)

    def verify(self, catalog_id: str, entries: list[dict]) -> dict[str, dict]:
        """Per uid: whether the service holds it, and which indexes and metadata differ."""
        data = self._send("POST", self._catalog_path(catalog_id, "verify"), body={"entries": entries})
        return data["results"]

    def get_object(self, catalog_id: str, uid: str) -> dict | None:
        try:
            return self._send("GET", self._catalog_path(catalog_id, "objects", uid))
        except ServiceRejected as exc:
            if exc.status == 404:
                return None
            raise


# A number token of 19 digits or more: orjson would round an integer beyond 64 bits to a float
# (metadata may hold one); json reads it exactly. (A string that looks so only costs the slower path.)
_LONG_DIGITS = re.compile(rb"[:,\[]\s*-?[0-9]{19}")


def _decode(content: bytes) -> Any:
    """A response body: orjson is several times faster than json on a page of brains; json reads
    a body that may hold integers beyond 64 bits, and whatever orjson refuses."""
    if _LONG_DIGITS.search(content) is None:
        try:
            return orjson.loads(content)
        except orjson.JSONDecodeError:
            pass
    return json.loads(content)


# Pauses between attempts: doubling from 0.1 s, at most MAX_PAUSE, or what the service's
# Retry-After asks (the service sends 1 s while its database is away), at most MAX_PAUSE as well:
# a page or a commit waits for the database within the call's timeout, and goes on soon after
# the database is back.
FIRST_PAUSE = 0.1
MAX_PAUSE = 1.0


def _pause(attempt: int, retry_after: float | None) -> float:
    backoff = min(FIRST_PAUSE * 2 ** (attempt - 1), MAX_PAUSE)
    return backoff if retry_after is None else min(max(backoff, retry_after), MAX_PAUSE)


def _retry_after(response: httpx.Response) -> float | None:
    """The answer's Retry-After in seconds (the delay form; a date is taken as no hint)."""
    value = response.headers.get("retry-after", "").strip()
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _problem(response: httpx.Response, method: str, path: str) -> CatalogServiceError:
    detail = None
    try:
        data = response.json()
        detail = data.get("detail") or data.get("title")
    except (ValueError, AttributeError):
        detail = response.text[:500]
    message = f"catalog service: {method} {path} answered {response.status_code}: {detail}"
    if response.status_code >= 500:
        return ServiceUnavailable(message, response.status_code, detail)
    if response.status_code == 404 and path.count("/") == 2:
        return CatalogNotFound(message, 404, detail)
    return ServiceRejected(message, response.status_code, detail)


_lock = threading.Lock()
_client: CatalogClient | None = None


def get_client() -> CatalogClient:
    """The process-wide client (its pool is shared by all threads)."""
    global _client
    if _client is None:
        with _lock:
            if _client is None:
                _client = CatalogClient(ConnectorSettings.from_environ())
    return _client


def reset_client(client: CatalogClient | None = None) -> None:
    """Replace the process-wide client (tests; after the environment changed)."""
    global _client
    with _lock:
        if _client is not None and _client is not client:
            _client.close()
        _client = client
