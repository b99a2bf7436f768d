"""The public routes: ``/search`` (GET, POST) and plone.restapi's ``@search`` and
``@querystring-search`` under each catalog.

Both answer in the public contract (docs/api.md, "Public search"): metadata as plain JSON,
``UID`` the Plone UID, ``@id`` the public URL, paths relative to the site; a page of 25 unless
asked (at most CATALOG_PUBLIC_MAX_B_SIZE); a name that is no index, option or field refused with
400 (unless CATALOG_PUBLIC_STRICT is off). Security comes from the credential only, as for the
connector's route.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

import orjson
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError

from catalog_schemas.api import (
    FacetRequest,
    PublicSearchRequest,
    PublicSearchResult,
    QuerystringSearchRequest,
    RestapiSearchResult,
    SearchRequest,
)

from ..api.caching import conditional_search
from ..api.deps import HEADERS, body_schema, idempotent, read_body
from ..api.problems import CATALOG_ERRORS, errors
from ..errors import BadRequest
from ..store.catalogs import Catalog
from ..store.search import Answer
from .extras import EXTRA_DESCRIPTIONS, SearchExtras
from .extras import PARAMETERS as EXTRA_PARAMETERS
from .form import parse_form, unflatten
from .query import InvalidParameter, QueryTyper, integer
from .querystring_search import (
    GET_URL_PARAMETERS,
    POST_URL_PARAMETERS,
    body_of_get,
    json_object,
    querystring_search,
    read_search,
    url_form,
)
from .restapi import DEFAULT_B_SIZE, Urls, check_b_size, public_item, public_page, restapi_response, site_of

router = APIRouter(tags=["public"], responses=errors(400, *CATALOG_ERRORS, 413))

SEARCH_CONTROLS = ("catalog", "q", "b_start", "b_size", "metadata", "facets", "facet_limit", "facet_sort",
                   *EXTRA_PARAMETERS)


def _typer(request: Request, catalog: Catalog) -> QueryTyper:
    return QueryTyper(catalog.schema, catalog.declarations, site_of(catalog), request.app.state.settings.public_strict)


# -- /search -----------------------------------------------------------------------------------


async def _public_search(request: Request, name: str, body: SearchRequest,
                         extras: SearchExtras | None = None) -> Answer:
    strict = request.app.state.settings.public_strict
    asked: dict = {}

    def build(catalog: Catalog, reader) -> SearchRequest:
        query = _typer(request, catalog).query(body.query)
        columns = None if body.metadata in (None, "*") else list(dict.fromkeys(body.metadata))
        if columns is not None:
            unknown = [c for c in columns if c not in catalog.metadata_names]
            if unknown and strict:
                valid = sorted(catalog.metadata_names)
                raise InvalidParameter(f"metadata: {', '.join(map(repr, unknown))} is no metadata column; valid: "
                                       f"{', '.join(valid)}", parameter="metadata", valid=valid)
            columns = [c for c in columns if c in catalog.metadata_names]
        asked["columns"] = columns
        read = None if columns is None else list(dict.fromkeys(
            [*columns, *(["UID"] if "UID" in catalog.metadata_names else [])]))
        b_size = body.b_size if body.b_size is not None else query.get("b_size")
        if b_size is not None:
            check_b_size(integer(b_size, "b_size"), request)
        elif "sort_limit" in query:
            check_b_size(integer(query["sort_limit"], "sort_limit"), request, "sort_limit")
        else:
            b_size = DEFAULT_B_SIZE  # never the whole catalog
        if extras is not None:
            # The page the search reads: b_size, else sort_limit caps it.
            fetched = b_size if b_size is not None else query.get("sort_limit")
            read = extras.metadata(catalog, None if fetched is None else integer(fetched, "b_size"), read)
        return body.model_copy(update={"query": query, "metadata": read,
                                       "b_size": None if b_size is None else integer(b_size, "b_size")})

    catalog, page = await public_page(request, name, build, None if extras is None else extras.after)
    urls = Urls.of(catalog, request)
    answer = {"items_total": page.total, "b_start": page.b_start, "b_size": page.b_size,
              "items": [public_item(catalog, urls, b, asked["columns"]) for b in page.brains]}
    if page.facets is not None:
        answer["facets"] = page.facets
    if extras is not None:
        answer["items"] = [extras.item(i, item) for i, item in enumerate(answer["items"])]
        extras.answer(answer)
    return Answer(body=orjson.dumps(answer), complete=page.complete, state=page.state)


@router.post("/search", response_model=PublicSearchResult,
             openapi_extra={**body_schema(PublicSearchRequest), **HEADERS})
@idempotent
async def search_post(request: Request, catalog: str):
    """A ZCatalog query (``PublicSearchRequest``: a ``SearchRequest`` with ``highlight`` and
    ``typo``) answered in the public contract."""
    body = await read_body(request, PublicSearchRequest)
    extras = SearchExtras.of(body.highlight, body.typo)
    query = SearchRequest.model_construct(**{name: getattr(body, name) for name in SearchRequest.model_fields})
    answer = await _public_search(request, catalog, query, extras)
    return Response(answer.body, media_type="application/json")


IF_NONE_MATCH = {"name": "if-none-match", "in": "header", "required": False, "schema": {"type": "string"},
                 "description": "An ETag of an earlier answer: 304 while the answer is unchanged"}
NOT_MODIFIED = {304: {"description": "Not modified: the ETag given in If-None-Match is current"}}


GET_PARAMETERS = {"parameters": [
    {"name": "q", "in": "query", "required": False, "schema": {"type": "string"},
     "description": 'A ZCatalog query as JSON, e.g. {"portal_type": "Document", "sort_on": "modified"}'},
    {"name": "b_start", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 0},
     "description": "The first result of the page"},
    {"name": "b_size", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 0},
     "description": "Results per page (25 unless given; at most CATALOG_PUBLIC_MAX_B_SIZE)"},
    {"name": "metadata", "in": "query", "required": False, "style": "form", "explode": True,
     "schema": {"type": "array", "items": {"type": "string"}},
     "description": "Metadata columns to return (repeat the parameter); * for all"},
    {"name": "facets", "in": "query", "required": False, "style": "form", "explode": True,
     "schema": {"type": "array", "items": {"type": "string"}},
     "description": "Indexes to count the matching objects' values of (repeat, or separate with commas)"},
    {"name": "facet_limit", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1},
     "description": "Values per facet (100 unless given)"},
    {"name": "facet_sort", "in": "query", "required": False, "schema": {"enum": ["count", "value"]},
     "description": "Facet values by count (the default) or by value"},
    *EXTRA_DESCRIPTIONS,
    {"name": "indexes", "in": "query", "required": False, "style": "form", "explode": True,
     "schema": {"type": "object", "additionalProperties": {"type": "string"}},
     "description": "Any other parameter names an index (or an index option: path.query, path.depth:int, "
                    "created.range) in Zope's form syntax, e.g. portal_type=Document&Subject:list=news"},
    IF_NONE_MATCH,
    *HEADERS["parameters"],
]}


def _facets_of(params) -> list[FacetRequest] | None:
    """``facets`` (repeated, or comma-separated index names), with ``facet_limit`` and
    ``facet_sort`` applying to each."""
    names = [name.strip() for value in params.getlist("facets") for name in value.split(",") if name.strip()]
    if not names:
        return None
    limit = integer(params["facet_limit"], "facet_limit") if "facet_limit" in params else None
    try:
        return [FacetRequest(index=name, limit=limit, sort=params.get("facet_sort", "count")) for name in names]
    except ValidationError as exc:
        raise BadRequest("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5]),
                         parameter="facets") from exc


@router.get("/search", response_model=PublicSearchResult, openapi_extra=GET_PARAMETERS,
            responses={304: {"description": "Not modified: the ETag given in If-None-Match is current"}})
@idempotent
async def search_get(request: Request, catalog: str):
    """Query string form: ``q`` is a JSON ZCatalog query, and index=value pairs in Zope's form
    syntax (``Subject:list=a``, ``path.query=/news&path.depth:int=1``; repeat a name for a list)
    add to it; plus ``b_start``, ``b_size`` and ``metadata`` (repeatable)."""
    pairs = parse_qsl(request.url.query, keep_blank_values=True)
    params = request.query_params
    query: dict = {}
    if "q" in params:
        try:
            query = orjson.loads(params["q"])
        except orjson.JSONDecodeError as exc:
            raise BadRequest("q must be a JSON object", parameter="q") from exc
        if not isinstance(query, dict):
            raise BadRequest("q must be a JSON object", parameter="q")
    query.update(unflatten(parse_form([(k, v) for k, v in pairs if k.split(":")[0] not in SEARCH_CONTROLS])))
    try:
        body = SearchRequest(
            query=query,
            b_start=integer(params["b_start"], "b_start") if "b_start" in params else None,
            b_size=integer(params["b_size"], "b_size") if "b_size" in params else None,
            metadata=params.getlist("metadata") or None,
            facets=_facets_of(params) or [],
        )
    except ValidationError as exc:  # a negative b_start, a NUL in a metadata name: 422, as a body's
        raise RequestValidationError([{**e, "loc": ("query", *e["loc"])} for e in exc.errors()]) from exc
    if (body.b_start or 0) < 0:
        raise InvalidParameter("b_start must not be negative", parameter="b_start")
    extras = SearchExtras.of(params.getlist("highlight") or None, params.get("typo"))
    return await conditional_search(request, catalog, lambda: _public_search(request, catalog, body, extras))


# -- /{catalog}/@search ------------------------------------------------------------------------


def _constrain_by_path(query: dict, catalog: Catalog) -> dict:
    """plone.restapi's SearchHandler._constrain_query_by_path, at the site root: no path means the
    whole site; a path given as text or list becomes the index query."""
    if "path" not in catalog.schema.indexes:
        return query
    path = query.get("path", {})
    if isinstance(path, str | list | tuple):
        path = {"query": path}
    if isinstance(path, dict) and "query" not in path:
        site = site_of(catalog).path
        if site is None:
            if path:
                raise InvalidParameter("path options without a path need the catalog's site_path setting",
                                       parameter="path")
            query = dict(query)
            query.pop("path", None)
            return query
        path = {**path, "query": site}
    return {**query, "path": path}


async def _restapi_search(request: Request, name: str, form: dict) -> Answer:
    form = dict(form)
    extras = SearchExtras.of(form.pop("highlight", None), form.pop("typo", None))
    if "fullobjects" in form:  # plone.restapi: present means yes, whatever its value
        return await restapi_response(request, name, {}, fullobjects=True)
    if "use_site_search_settings" in form:
        raise InvalidParameter("use_site_search_settings: the service does not know the site's search settings "
                               "(types not searched, default sort); name portal_type and sort_on instead",
                               parameter="use_site_search_settings")
    metadata_fields = form.pop("metadata_fields", None)
    text = form.get("SearchableText")
    if isinstance(text, str):
        # plone.restapi removes parentheses, and answers an empty text or "*" with an empty list.
        text = text.replace("(", " ").replace(")", " ").strip()
        if not text or text == "*":
            return Answer(body=b"[]", complete=True)
        form["SearchableText"] = text

    def query_for(catalog: Catalog) -> dict:
        return _typer(request, catalog).query(_constrain_by_path(form, catalog))

    return await restapi_response(request, name, query_for, metadata_fields, extras=extras)




@router.get("/{catalog}/@search", response_model=RestapiSearchResult,
            openapi_extra={"parameters": [*EXTRA_DESCRIPTIONS, IF_NONE_MATCH, *HEADERS["parameters"]]},
            responses=NOT_MODIFIED)
@idempotent
async def restapi_search_get(request: Request, catalog: str):
    """plone.restapi's ``@search`` of the catalog's site: its query string (Zope form syntax,
    dotted index options), its answer; with an ETag, and 304 for a current one."""
    form = unflatten(parse_form(parse_qsl(request.url.query, keep_blank_values=True)))
    return await conditional_search(request, catalog, lambda: _restapi_search(request, catalog, form))


@router.post("/{catalog}/@search", response_model=RestapiSearchResult, openapi_extra=HEADERS)
@idempotent
async def restapi_search_post(request: Request, catalog: str):
    """The same parameters as a JSON object (for queries too long for a URL)."""
    try:
        form = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise BadRequest("the body must be a JSON object of @search parameters") from exc
    if not isinstance(form, dict):
        raise BadRequest("the body must be a JSON object of @search parameters")
    answer = await _restapi_search(request, catalog, unflatten(form))
    return Response(answer.body, media_type="application/json")


# -- /{catalog}/@querystring-search ------------------------------------------------------------


QUERYSTRING_GET = {"parameters": [
    {"name": "query", "in": "query", "required": True, "schema": {"type": "string"},
     "description": "The @querystring-search body as JSON: "
                    '{"query": [{"i": "portal_type", "o": "plone.app.querystring.operation.selection.any", '
                    '"v": ["Document"]}], "sort_on": "effective", "b_size": 10}'},
    {"name": "b_start", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 0},
     "description": "The first item of the page, when the JSON does not name one (batching links)"},
    {"name": "b_size", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1},
     "description": "Items per page, when the JSON does not name them"},
    *EXTRA_DESCRIPTIONS, IF_NONE_MATCH, *HEADERS["parameters"],
]}
QUERYSTRING_POST = {**body_schema(QuerystringSearchRequest), "parameters": [
    {"name": "b_start", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 0},
     "description": "The first item of the page, when the body does not name one (batching links)"},
    {"name": "b_size", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1},
     "description": "Items per page, when the body does not name them"},
    {"name": "metadata_fields", "in": "query", "required": False, "style": "form", "explode": True,
     "schema": {"type": "array", "items": {"type": "string"}},
     "description": "Metadata columns to add to each item (instead of the body's)"},
    *EXTRA_DESCRIPTIONS, *HEADERS["parameters"],
]}


async def _querystring_get(request: Request, catalog: str, context_path: str) -> Response:
    form = url_form(request, GET_URL_PARAMETERS)
    # Only the batching parameters beside the JSON (the GET form's fields are the JSON's).
    search = read_search(body_of_get(form), {k: v for k, v in form.items() if k in ("b_start", "b_size")}, request)
    extras = SearchExtras.of(form.get("highlight"), form.get("typo"))
    return await conditional_search(request, catalog,
                                    lambda: querystring_search(request, catalog, search, context_path, extras))


async def _querystring_post(request: Request, catalog: str, context_path: str) -> Response:
    form = url_form(request, POST_URL_PARAMETERS)
    search = read_search(json_object(await request.body()), form, request)
    extras = SearchExtras.of(form.get("highlight"), form.get("typo"))
    answer = await querystring_search(request, catalog, search, context_path, extras)
    return Response(answer.body, media_type="application/json")


@router.post("/{catalog}/@querystring-search", response_model=RestapiSearchResult, openapi_extra=QUERYSTRING_POST)
@idempotent
async def querystring_search_post(request: Request, catalog: str):
    """plone.restapi's ``@querystring-search`` at the site root: plone.app.querystring criteria,
    ``sort_on``, ``sort_order``, ``limit``, ``b_start``, ``b_size``, ``metadata_fields``; the answer
    in ``@search``'s shape."""
    return await _querystring_post(request, catalog, "")


@router.get("/{catalog}/@querystring-search", response_model=RestapiSearchResult, openapi_extra=QUERYSTRING_GET,
            responses=NOT_MODIFIED)
@idempotent
async def querystring_search_get(request: Request, catalog: str):
    """The same with the body as JSON in the ``query`` parameter; with an ETag, and 304 for a
    current one."""
    return await _querystring_get(request, catalog, "")


@router.post("/{catalog}/{path:path}/@querystring-search", response_model=RestapiSearchResult,
             openapi_extra=QUERYSTRING_POST)
@idempotent
async def querystring_search_context_post(request: Request, catalog: str, path: str):
    """``@querystring-search`` of the object at ``path`` (relative to the site): relative paths start
    there, and the object itself is left out of the answer."""
    return await _querystring_post(request, catalog, path)


@router.get("/{catalog}/{path:path}/@querystring-search", response_model=RestapiSearchResult,
            openapi_extra=QUERYSTRING_GET, responses=NOT_MODIFIED)
@idempotent
async def querystring_search_context_get(request: Request, catalog: str, path: str):
    """The same with the body as JSON in the ``query`` parameter."""
    return await _querystring_get(request, catalog, path)
