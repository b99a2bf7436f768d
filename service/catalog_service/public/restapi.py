"""Answers in the public contract: plone.restapi's ``@search`` shape, and ``/search``'s items.

``restapi_response`` is the serializer of every plone.restapi-compatible route: give it a ZCatalog
query (typed, e.g. by ``query.QueryTyper``, or a function of the catalog that returns one) and it
runs the search with the caller's security and answers what plone.restapi's
``LazyCatalogResultSerializer`` answers for the same brains: ``@id``, ``items_total``, ``items``
(the summary of each brain), ``batching`` when there is more than one page, as an
``store.search.Answer`` (body, completeness and the catalog state it was read at, for ETags).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlencode

import orjson
from fastapi import Request

from catalog_schemas.api import SearchRequest
from catalog_schemas.public_values import public_value

from ..api.auth import Caller, Credential, security_for
from ..api.deps import credential_of, limits_for
from ..api.search import caller_for, searched
from ..errors import LimitExceeded
from ..metrics import QUERIES
from ..planner.plan import Limits, Security
from ..store.catalogs import Catalog
from ..store.search import Answer, Brain, Page, StaleSchema, search_page
from .query import InvalidParameter, Site, integer

if TYPE_CHECKING:
    from .extras import SearchExtras

DEFAULT_B_SIZE = 25  # plone.restapi's DEFAULT_BATCH_SIZE
DEFAULT_FIELDS = ("@id", "@type", "description", "review_state", "title", "type_title")
NON_METADATA = ("getPath", "getURL")
# The metadata the default fields are read from.
SUMMARY_COLUMNS = ("Title", "Description", "portal_type", "review_state")
# Parameters plone.restapi's batch links and canonical URL leave out.
BATCH_PARAMETERS = ("b_size", "b_start", "sort_on", "sort_order", "sort_limit")

def site_of(catalog: Catalog) -> Site:
    path = catalog.settings.site_path
    return Site(None if path is None else path.rstrip("/"))


def request_url(request: Request) -> str:
    """The URL the caller asked, without its query string (plone.restapi's ACTUAL_URL): its path
    as sent, still quoted (a context path with ``%`` or non-ASCII letters)."""
    raw = request.scope.get("raw_path")
    url = request.url.replace(query="")
    if raw:
        url = url.replace(path=(request.scope.get("root_path", "") + raw.decode("latin-1")).split("?", 1)[0])
    return str(url)


@dataclass(frozen=True)
class Urls:
    """Public addresses of a catalog's objects."""

    base: str  # the public site URL, or the service's address of the catalog
    site: str | None  # the site's physical path, if known

    @classmethod
    def of(cls, catalog: Catalog, request: Request) -> Urls:
        base = catalog.settings.public_url or f"{str(request.base_url).rstrip('/')}/{catalog.name}"
        return cls(base=base.rstrip("/"), site=site_of(catalog).path)

    def site_path(self, path: str) -> str:
        if self.site is not None:
            return self.site
        first = path.strip("/").split("/", 1)[0]
        return "/" + first if first else ""

    def relative(self, path: str) -> str:
        """The path relative to the site: '' for the site, '/folder/page' for an object in it."""
        site = self.site_path(path)
        if path == site:
            return ""
        if site and path.startswith(site + "/"):
            return path[len(site):]
        return path

    def url(self, path: str) -> str:
        """The public URL: each path component quoted, as Zope's physicalPathToURL does."""
        return self.base + "/".join(quote(c) for c in self.relative(path).split("/"))


def public_uid(catalog: Catalog, brain: Brain):
    """The Plone UID: the UID metadata column (the connector keys entries by path), else the
    entry's own uid (a catalog written by another client keys them as it likes)."""
    if "UID" in catalog.metadata_names:
        return public_value(brain.metadata.get("UID"))
    return brain.uid


# -- running a public search -----------------------------------------------------------------


@dataclass(frozen=True)
class CatalogReader:
    """What a public search's builder may ask before the search runs, on the search's connection
    and catalog: who the caller is (from the credential, as the search decides it) and the brains
    of small searches with a security of its choosing (plone.app.querystring's lookups)."""

    conn: Any
    state: Any
    catalog: Catalog
    credential: Credential
    limits: Limits
    refreshed: bool

    def caller(self) -> Caller:
        return caller_for(self.state, self.catalog, self.credential, self.refreshed)

    def security(self, show_inactive: bool = False) -> Security:
        """The security the search runs with (api.auth.security_for)."""
        return security_for(self.caller(), self.credential, show_inactive, datetime.now(UTC))

    async def brains(self, query: dict, security: Security, metadata: list[str], b_size: int = 1) -> list[Brain]:
        page = await search_page(self.conn, self.catalog,
                                 SearchRequest(query=query, metadata=metadata, b_start=0, b_size=b_size),
                                 security, self.limits)
        return page.brains


Build = Callable[[Catalog, CatalogReader], SearchRequest | Awaitable[SearchRequest]]
# What runs on the search's connection once the page is found (public.extras): the page it gives
# is the one answered.
After = Callable[[Catalog, CatalogReader, SearchRequest, Page], Awaitable[Page]]


async def on_current_catalog(state, conn, name: str, run: Callable[[Catalog, bool], Awaitable]) -> tuple:
    """(catalog, ``run(catalog, refreshed)``) for the catalog as the registry holds it, and once more
    with a fresh copy when ``run`` finds it stale (StaleSchema)."""
    refresh = False
    while True:
        catalog = await state.registry.current(conn, name, refresh=refresh)
        if not refresh:
            QUERIES.labels(name).inc()
        try:
            return catalog, await run(catalog, refresh)
        except StaleSchema:
            if refresh:
                raise
            refresh = True


async def on_read_connection(request: Request, on: Callable[[Any], Awaitable]) -> tuple[Any, Any]:
    """(the pool, ``on(conn)``) on a connection of a read replica when there is one (one that has
    replayed the caller's ``X-Catalog-Min-LSN``), else of the primary."""
    state = request.app.state
    pool, conn = await state.db.acquire_read(request.headers.get("x-catalog-min-lsn"))
    try:
        return pool, await on(conn)
    finally:
        await state.db.release_read(pool, conn)


async def within_public_timeout(state, work, what: str, trusted: bool = False):
    """Await ``work`` within the public search timeout (as api.search.searched bounds a search),
    unless the caller has the service credential; past it a 422 naming ``what``."""
    timeout = state.settings.public_search_timeout
    if trusted or timeout <= 0:
        return await work
    try:
        async with asyncio.timeout(timeout):
            return await work
    except TimeoutError:
        raise LimitExceeded(f"{what} took longer than {timeout:g} s, the most for a search without the "
                            f"service credential; narrow it") from None


async def public_page(request: Request, name: str, build: Build, after: After | None = None
                      ) -> tuple[Catalog, Page]:
    """The page ``build(catalog, reader)`` asks for (a function or a coroutine function), with the
    caller's security (api.search.searched), from a read replica when there is one, passed
    through ``after`` if given; ``build`` runs again if the catalog changed."""
    state = request.app.state
    cred, lim = credential_of(request.headers), limits_for(request)

    async def on(conn) -> tuple[Catalog, Page]:
        async def run(catalog: Catalog, refresh: bool) -> Page:
            reader = CatalogReader(conn, state, catalog, cred, lim, refresh)
            body = build(catalog, reader)
            if inspect.isawaitable(body):
                body = await body
            page = await searched(conn, state, catalog, body, cred, lim, runner=search_page, refreshed=refresh)
            return page if after is None else await within_public_timeout(
                state, after(catalog, reader, body, page), "the corrections and highlights")

        return await on_current_catalog(state, conn, name, run)

    pool, (catalog, page) = await on_read_connection(request, on)
    if not page.complete and pool is not state.db.primary:
        async with state.db.acquire() as conn:
            catalog, page = await on(conn)
    return catalog, page


def check_b_size(b_size: int, request: Request, where: str = "b_size") -> int:
    maximum = request.app.state.settings.public_max_b_size
    if b_size < 1 or b_size > maximum:
        raise InvalidParameter(f"{where} must be 1 to {maximum}, got {b_size}", parameter=where)
    return b_size


# -- plone.restapi's shape ----------------------------------------------------------------------


def summary_fields(requested, catalog: Catalog, strict: bool) -> tuple[list[str], list[str] | str]:
    """(the item's fields, the metadata to read) for ``metadata_fields`` (plone.restapi's
    DefaultJSONSummarySerializer.metadata_fields; ``_all`` is every column plus getPath/getURL)."""
    if requested is None:
        requested = []
    elif not isinstance(requested, list | tuple):
        requested = [requested]
    requested = [str(f) for f in requested]
    known = set(catalog.metadata) | set(NON_METADATA)
    if "_all" in requested:
        extra = sorted(known)
        read: list[str] | str = "*"
    else:
        unknown = sorted(set(requested) - known - set(DEFAULT_FIELDS))
        if unknown and strict:
            valid = sorted(known | {"_all"})
            raise InvalidParameter(f"metadata_fields: {', '.join(map(repr, unknown))} is no metadata column; "
                                   f"valid: {', '.join(valid)}", parameter="metadata_fields", valid=valid)
        extra = [f for f in dict.fromkeys(requested) if f in known]
        read = [c for c in dict.fromkeys([*SUMMARY_COLUMNS, *extra]) if c in catalog.metadata_names]
    fields = list(dict.fromkeys([*DEFAULT_FIELDS, *extra]))
    # plone.restapi leaves out names starting with an underscore.
    return [f for f in fields if not f.startswith("_")], read


def restapi_item(catalog: Catalog, urls: Urls, brain: Brain, fields: list[str]) -> dict:
    meta = brain.metadata
    portal_type = public_value(meta.get("portal_type"))
    type_title = catalog.settings.type_titles.get(portal_type, portal_type) if isinstance(portal_type, str) \
        else portal_type
    url = urls.url(brain.path)
    item = {}
    for field in fields:
        if field == "@id" or field == "getURL":
            item[field] = url
        elif field == "@type":
            item[field] = portal_type
        elif field == "title":
            item[field] = public_value(meta.get("Title"))
        elif field == "description":
            item[field] = public_value(meta.get("Description"))
        elif field == "type_title":
            item[field] = type_title
        elif field == "getPath":
            item[field] = brain.path
        else:
            item[field] = public_value(meta.get(field))
    return item


def _with_query(url: str, pairs: list[tuple[str, str]]) -> str:
    return f"{url}?{urlencode(pairs)}" if pairs else url


def canonical_url(url: str, query_string: str) -> str:
    """plone.restapi's HypermediaBatch.canonical_url: the query without batching and sorting."""
    return _with_query(url, [(k, v) for k, v in parse_qsl(query_string) if k not in BATCH_PARAMETERS])


def _batch_url(url: str, query_string: str, b_start: int) -> str:
    kept = [(k, v) for k, v in parse_qsl(query_string, keep_blank_values=True) if k != "b_start"]
    return _with_query(url, [("b_start", str(b_start)), *kept])


def page_bounds(total: int, b_start: int, b_size: int) -> tuple[int, int]:
    """plone.batching's Batch(sequence, b_size, b_start) with no orphans: (first, end), the
    slice of the result the page shows."""
    start = b_start + 1
    beyond = start > total
    start = min(start, total)
    end = min(start + b_size - 1, total)
    first = end if beyond else max(start - 1, 0)
    return first, end


def batching_links(url: str, query_string: str, total: int, b_start: int, b_size: int) -> dict | None:
    """plone.restapi's HypermediaBatch.links: none when everything fits on one page."""
    if total <= b_size:
        return None
    first, end = page_bounds(total, b_start, b_size)
    pages = max(1, -(-total // b_size))
    links = {"@id": f"{url}?{query_string}" if query_string else url,
             "first": _batch_url(url, query_string, 0),
             "last": _batch_url(url, query_string, (pages - 1) * b_size)}
    if end < total:
        links["next"] = _batch_url(url, query_string, end)
    if first:
        links["prev"] = _batch_url(url, query_string, max(0, first - b_size))
    return links


def restapi_answer(request: Request, catalog: Catalog, page: Page, brains: list[Brain], items_total: int,
                   b_start: int, b_size: int, fields: list[str], extras: SearchExtras | None = None) -> Answer:
    """The LazyCatalogResultSerializer's answer: ``brains`` are the page's, ``items_total`` what
    plone.batching counts, ``b_start``/``b_size`` the page HypermediaBatch shows; with ``extras``,
    what highlight and typo found added."""
    urls = Urls.of(catalog, request)
    url, query_string = request_url(request), request.url.query
    answer = {"@id": canonical_url(url, query_string), "items_total": items_total}
    links = batching_links(url, query_string, items_total, b_start, b_size)
    if links:
        answer["batching"] = links
    answer["items"] = [restapi_item(catalog, urls, brain, fields) for brain in brains]
    if extras is not None:
        answer["items"] = [extras.item(i, item) for i, item in enumerate(answer["items"])]
        extras.answer(answer)
    return Answer(body=orjson.dumps(answer), complete=page.complete, state=page.state or ())


async def restapi_response(request: Request, name: str, query: dict | Callable[[Catalog], dict],
                           metadata_fields=None, fullobjects: bool = False,
                           extras: SearchExtras | None = None) -> Answer:
    """plone.restapi's answer to ``catalog.searchResults(**query)`` serialized for ``request``.

    ``query``: a ZCatalog query as plone.restapi passes it to the catalog (its ``b_start``,
    ``b_size`` and ``sort_limit`` included; the page shown is ``b_start`` and ``b_size``, 25 when
    not given), or a function of the catalog returning one. ``metadata_fields`` as the request
    gave it. ``fullobjects`` is refused: the service holds no objects."""
    if fullobjects:
        raise InvalidParameter("fullobjects: the catalog service holds catalog records, not objects; "
                               "ask the Plone site for full objects, or name metadata_fields",
                               parameter="fullobjects")
    strict = request.app.state.settings.public_strict
    shape: dict = {}

    def build(catalog: Catalog, reader: CatalogReader) -> SearchRequest:
        catalog_query = dict(query(catalog) if callable(query) else query)
        b_start = integer(catalog_query.get("b_start", 0), "b_start")
        if b_start < 0:
            raise InvalidParameter("b_start must not be negative", parameter="b_start")
        page_size = catalog_query.get("b_size")
        page_size = check_b_size(DEFAULT_B_SIZE if page_size is None else integer(page_size, "b_size"), request)
        if "sort_limit" in catalog_query:
            check_b_size(integer(catalog_query["sort_limit"], "sort_limit"), request, "sort_limit")
        shape.update(b_start=b_start, b_size=page_size)
        shape["fields"], read = summary_fields(metadata_fields, catalog, strict)
        if extras is not None:
            # The brains the catalog reads: b_size or sort_limit when the query names one (the
            # page is then cut from them), else the page.
            fetched = catalog_query.get("b_size", catalog_query.get("sort_limit"))
            read = extras.metadata(catalog, page_size if fetched is None else integer(fetched, "b_size"), read)
        body = {"query": catalog_query, "metadata": read}
        if "b_size" not in catalog_query and "sort_limit" not in catalog_query:
            # The catalog's result unbatched, then the page of it (HypermediaBatch): that page only.
            body.update(b_start=b_start, b_size=page_size)
        return SearchRequest.model_validate(body)

    catalog, page = await public_page(request, name, build, None if extras is None else extras.after)
    first, end = page_bounds(page.total, shape["b_start"], shape["b_size"])
    # A batch the catalog cut itself (b_size or sort_limit in the query) is shown from its start.
    brains = page.brains[:max(0, end - first)]
    return restapi_answer(request, catalog, page, brains, page.total, shape["b_start"], shape["b_size"],
                          shape["fields"], extras)


# -- /search's shape ---------------------------------------------------------------------------


def public_item(catalog: Catalog, urls: Urls, brain: Brain, columns: list[str] | None) -> dict:
    metadata = brain.metadata if columns is None else {c: brain.metadata[c] for c in columns if c in brain.metadata}
    return {"@id": urls.url(brain.path), "UID": public_uid(catalog, brain), "path": urls.relative(brain.path),
            "score": brain.score, "metadata": {k: public_value(v) for k, v in metadata.items()}}
