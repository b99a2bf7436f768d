"""plone.restapi's ``@querystring-search`` answered by the service.

The request is read as plone.restapi's ``QuerystringSearch`` and ``HypermediaBatch`` read it:
``query`` (the criteria, required), ``sort_on``, ``sort_order`` (anything but "descending" is
ascending), ``limit`` (the catalog's ``sort_limit``; ``items_total`` counts at most that many),
``b_start``/``b_size`` (from the body, else from the URL's query string, else 0 and 25),
``metadata_fields``, ``fullobjects`` (refused: the service holds no objects). Other keys of the
body are ignored, as plone.restapi ignores them (Volto sends its block's data along).

The criteria become a catalog query as plone.app.querystring's QueryBuilder makes it
(``public.querystring``): the context is the site root for ``/{catalog}/@querystring-search``
and the site's path plus ``path`` for ``/{catalog}/{path}/@querystring-search``, whose own
object is left out (``custom_query={"UID": {"not": <its UID>}}``, as plone.restapi asks); the
caller's id and roles (``currentUser``, ``showInactive``) come from the principals the server
decided for the credential; "today" is the catalog's ``timezone`` setting's. What Plone looks up
in its catalog or object tree is asked of the catalog: the path of a UID and whether an object
exists unrestricted, the UID at a path with the caller's rights.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from urllib.parse import parse_qsl, unquote
from zoneinfo import ZoneInfo

import orjson
from fastapi import Request

from catalog_schemas.api import SearchRequest

from ..errors import BadRequest, NotFound
from ..planner.plan import UNRESTRICTED, Security
from ..store.catalogs import Catalog
from ..store.search import Answer
from . import querystring as qs
from .extras import SearchExtras
from .form import parse_form
from .query import InvalidParameter, boolean_value
from .restapi import (
    DEFAULT_B_SIZE,
    CatalogReader,
    check_b_size,
    page_bounds,
    public_page,
    public_uid,
    restapi_answer,
    site_of,
    summary_fields,
)

PATH_INDEX = "path"
UID_INDEX = "UID"
# The URL's query parameters each form reads besides the body (highlight and typo: public.extras).
GET_URL_PARAMETERS = ("query", "b_start", "b_size", "highlight", "typo")
POST_URL_PARAMETERS = ("b_start", "b_size", "metadata_fields", "highlight", "typo")


@dataclass(frozen=True)
class QuerystringSearch:
    """A request as plone.restapi reads it."""

    criteria: list
    sort_on: object
    sort_order: str | None
    limit: int | None
    b_start: int
    b_size: int
    metadata_fields: object


def _parse_int(data: dict, name: str, default):
    """plone.restapi's ``parse_int``: ``int()`` of the value, 400 where that fails."""
    value = data.get(name, default)
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidParameter(f"{name}: {value!r} is no integer", parameter=name) from None


def read_search(data: dict, form: dict, request: Request) -> QuerystringSearch:
    """``data``: the JSON body (for GET, the ``query`` parameter's JSON); ``form``: the URL's query
    parameters as Zope's publisher reads them."""
    # QuerystringSearch: the integers, fullobjects, then the query.
    _parse_int(data, "b_start", 0)
    _parse_int(data, "b_size", DEFAULT_B_SIZE)
    limit = data.get("limit")
    if limit is not None:
        limit = _parse_int(data, "limit", None)
        if limit < 0:
            raise InvalidParameter(f"limit must not be negative, got {limit}", parameter="limit")
    fullobjects = boolean_value(data.get("fullobjects", False), "fullobjects")
    criteria = data.get("query")
    if not criteria:
        raise InvalidParameter("No query supplied", parameter="query")
    if fullobjects:
        raise InvalidParameter("fullobjects: the catalog service holds catalog records, not objects; "
                               "ask the Plone site for full objects, or name metadata_fields",
                               parameter="fullobjects")
    sort_order = data.get("sort_order")
    if sort_order:
        sort_order = "descending" if sort_order == "descending" else "ascending"
    # HypermediaBatch: the body's value unless it is 0 or absent, then the URL's.
    b_start = _parse_int(data, "b_start", False) or _parse_int(form, "b_start", 0)
    b_size = _parse_int(data, "b_size", False) or _parse_int(form, "b_size", DEFAULT_B_SIZE)
    if b_start < 0:
        raise InvalidParameter(f"b_start must not be negative, got {b_start}", parameter="b_start")
    check_b_size(b_size, request)
    fields = form["metadata_fields"] if "metadata_fields" in form else data.get("metadata_fields")
    return QuerystringSearch(criteria=criteria, sort_on=data.get("sort_on"), sort_order=sort_order,
                             limit=limit or None, b_start=b_start, b_size=b_size, metadata_fields=fields)


def url_form(request: Request, allowed: tuple[str, ...]) -> dict:
    """The URL's query parameters (Zope's form syntax); in strict mode, only ``allowed`` ones."""
    form = parse_form(parse_qsl(request.url.query, keep_blank_values=True))
    unknown = sorted(set(form) - set(allowed))
    if unknown and request.app.state.settings.public_strict:
        raise InvalidParameter(f"unknown parameter {', '.join(map(repr, unknown))}; valid: {', '.join(allowed)}",
                               parameter=unknown[0], valid=list(allowed))
    return form


def body_of_get(form: dict) -> dict:
    """The GET form's body: plone.restapi takes the ``query`` parameter, unquoted once more, as
    the request's JSON body."""
    text = form.get("query", "{}")
    if not isinstance(text, str):
        raise InvalidParameter("query must be given once, as a JSON object", parameter="query")
    return json_object(unquote(text))


def json_object(text: str | bytes) -> dict:
    try:
        data = orjson.loads(text or b"{}")
    except orjson.JSONDecodeError as exc:
        raise BadRequest("No JSON object could be decoded") from exc
    if not isinstance(data, dict):
        raise BadRequest("Malformed body: a JSON object of @querystring-search parameters is expected")
    return data


def _place(catalog: Catalog, context_path: str, security: Security) -> qs.Place:
    site = site_of(catalog).path
    if site is None:
        raise InvalidParameter("@querystring-search needs the catalog's site_path setting "
                               "(PATCH /catalogs/{id}/settings; the connector sets it)", parameter="path")
    inner = context_path.strip("/")
    context = f"{site}/{inner}" if inner else site
    return qs.place_for_principals(site, context, security.principals, datetime.now(UTC),
                                   tz=ZoneInfo(catalog.settings.timezone))


def _lookups(catalog: Catalog, reader: CatalogReader, as_caller: Security):
    # Plone's unrestricted lookups, within a scoped key's filter: the key sees the catalog as if it
    # held only the filter's objects.
    unrestricted = replace(UNRESTRICTED, scope=as_caller.scope)

    async def lookup(question):
        if isinstance(question, qs.PathOfUid):
            if UID_INDEX not in catalog.schema.indexes:
                return None
            brains = await reader.brains({UID_INDEX: question.uid}, unrestricted, [])
            return brains[0].path if brains else None
        at = {PATH_INDEX: {"query": question.path, "depth": 0}}
        if isinstance(question, qs.IsObject):
            return bool(await reader.brains(at, unrestricted, []))
        if isinstance(question, qs.UidOfPath):
            brains = await reader.brains(at, as_caller, [UID_INDEX] if UID_INDEX in catalog.metadata_names else [])
            return public_uid(catalog, brains[0]) if brains else None
        raise TypeError(f"no lookup {question!r}")
    return lookup


async def querystring_search(request: Request, name: str, search: QuerystringSearch, context_path: str = "",
                             extras: SearchExtras | None = None) -> Answer:
    """The answer plone.restapi gives to ``search`` at the context ``context_path`` (relative to the
    site; '' for the site root), with what ``extras`` (highlight, typo) add."""
    strict = request.app.state.settings.public_strict
    shape: dict = {}

    async def build(catalog: Catalog, reader: CatalogReader) -> SearchRequest:
        security = reader.security()
        # Plone traverses to the context (and reference.is to its target) with the caller's
        # rights, whatever the object's effective dates.
        as_caller = replace(security, effective_at=None)  # a key's filter kept
        place = _place(catalog, context_path, security)
        lookup = _lookups(catalog, reader, as_caller)
        custom_query = None
        if place.context != place.site_root:
            # plone.restapi leaves the context's own object out.
            uid = await lookup(qs.UidOfPath(place.context))
            if uid is None:
                raise NotFound(f"no object at {context_path!r} that the caller may see")
            custom_query = {UID_INDEX: {"not": uid}}
        built = await qs.run_async(qs.querystring_query(
            search.criteria, place, catalog.schema.indexes, search.sort_on, search.sort_order, search.limit,
            custom_query), lookup)
        query = qs.to_wire(built.query)
        query.pop("sort_limit", None)  # the limit is applied to the page below, as ZCatalog's result
        show_inactive = bool(query.pop("show_inactive", False))
        shape["fields"], read = summary_fields(search.metadata_fields, catalog, strict)
        shape["empty"] = built.empty
        size = search.b_size
        if search.limit:
            size = max(0, min(size, search.limit - search.b_start))
        if built.empty:  # QueryBuilder runs no search
            query, size = {}, 0
        if extras is not None:
            read = extras.metadata(catalog, search.b_size, read)
        return SearchRequest(query=query, metadata=read, b_start=search.b_start, b_size=size,
                             show_inactive=show_inactive)

    catalog, page = await public_page(request, name, build, None if extras is None else extras.after)
    total = 0 if shape["empty"] else page.total
    if search.limit:
        total = min(total, search.limit)  # QueryBuilder caps actual_result_count at the limit
    first, end = page_bounds(total, search.b_start, search.b_size)
    brains = [] if shape["empty"] else page.brains[:max(0, end - first)]
    return restapi_answer(request, catalog, page, brains, total, search.b_start, search.b_size, shape["fields"],
                          extras)
