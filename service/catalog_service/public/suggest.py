"""The suggest routes for search-as-you-type: ``GET /{catalog}/@suggest?q=...`` and
``GET /suggest?catalog=...&q=...``.

They follow the public searches' conventions (docs/api.md): security from the credential only
(Anonymous without one), never inactive content, an ETag and 304, CORS, problem details for a
parameter the route does not know or a value out of range. What they answer comes from
store.suggest, which shows only what one visible, effective object holds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from catalog_schemas.public_values import public_value

from ..api.auth import security_for
from ..api.caching import conditional_search
from ..api.deps import HEADERS, credential_of, idempotent, state_limits
from ..api.problems import CATALOG_ERRORS, errors
from ..api.search import caller_for
from ..indexes.text import ZCTextIndex
from ..store.catalogs import Catalog
from ..store.search import Answer
from ..store.suggest import Suggestions, Typed, suggestions
from .query import InvalidParameter, integer
from .querystring_search import url_form
from .restapi import Urls, on_current_catalog, on_read_connection, request_url, within_public_timeout
from .routes import IF_NONE_MATCH, NOT_MODIFIED

router = APIRouter(tags=["public"], responses=errors(400, *CATALOG_ERRORS))

DEFAULT_LIMIT = 10
MAX_LIMIT = 50
MAX_Q_LENGTH = 200
DEFAULT_INDEX = "SearchableText"
PARAMETERS = ("q", "limit", "index")


class SuggestedWord(BaseModel):
    word: str = Field(description="A completion of the last typed word, as the text index holds it "
                                  "(lower-cased, accents folded)")


class SuggestedTitle(BaseModel):
    title: Any = Field(description="The object's Title metadata")
    id: str = Field(alias="@id", description="The object's public URL")
    UID: Any = Field(description="The Plone UID")
    path: str = Field(description="The path relative to the site")


class SuggestResult(BaseModel):
    id: str = Field(alias="@id")
    q: str
    words: list[SuggestedWord]
    titles: list[SuggestedTitle]


SUGGEST_PARAMETERS = [
    {"name": "q", "in": "query", "required": True, "schema": {"type": "string", "maxLength": MAX_Q_LENGTH},
     "description": "What the user typed so far: its last word is completed, the whole text starts titles"},
    {"name": "limit", "in": "query", "required": False,
     "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
     "description": "Words and titles each, at most"},
    {"name": "index", "in": "query", "required": False, "schema": {"type": "string", "default": DEFAULT_INDEX},
     "description": "The ZCTextIndex whose lexicon completes the last word"},
    IF_NONE_MATCH, *HEADERS["parameters"],
]


def _parameters(request: Request, extra: tuple[str, ...] = ()) -> tuple[str, int, str]:
    form = url_form(request, PARAMETERS + extra)
    q = form.get("q")
    if not isinstance(q, str):
        raise InvalidParameter("q: the text typed so far is required, once", parameter="q")
    if "\x00" in q:
        raise InvalidParameter("q: the text cannot hold NUL characters", parameter="q")
    if len(q) > MAX_Q_LENGTH:
        raise InvalidParameter(f"q: at most {MAX_Q_LENGTH} characters, got {len(q)}", parameter="q")
    limit = integer(form.get("limit", DEFAULT_LIMIT), "limit")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidParameter(f"limit must be 1 to {MAX_LIMIT}, got {limit}", parameter="limit")
    index = form.get("index", DEFAULT_INDEX)
    if not isinstance(index, str):
        raise InvalidParameter("index: one index name", parameter="index")
    return q, limit, index


def _text_index(catalog: Catalog, name: str, explicit: bool) -> ZCTextIndex | None:
    """The text index completing words; None when the catalog has none of the default name."""
    index = catalog.schema.indexes.get(name)
    if isinstance(index, ZCTextIndex):
        return index
    if not explicit and index is None:
        return None
    valid = sorted(n for n, i in catalog.schema.indexes.items() if isinstance(i, ZCTextIndex))
    raise InvalidParameter(f"index: {name!r} is no ZCTextIndex of the catalog; valid: {', '.join(valid)}",
                           parameter="index", valid=valid)


async def _suggest(request: Request, name: str, q: str, limit: int, index_name: str, explicit: bool) -> Answer:
    state = request.app.state
    cred = credential_of(request.headers)
    typed = Typed.of(q)

    async def on(conn) -> tuple[Catalog, Suggestions]:
        async def run(catalog: Catalog, refresh: bool) -> Suggestions:
            caller = caller_for(state, catalog, cred, refresh)
            # Suggestions never come from inactive content, whatever the credential.
            security = security_for(caller, cred, False, datetime.now(UTC))
            index = _text_index(catalog, index_name, explicit)
            found = suggestions(conn, catalog, index, typed, security, state_limits(state, caller.trusted), limit)
            return await within_public_timeout(state, found, "the suggestions", caller.trusted)

        return await on_current_catalog(state, conn, name, run)

    _, (catalog, found) = await on_read_connection(request, on)
    return Answer(body=orjson.dumps(_answer(request, catalog, q, found)), complete=True, state=found.state)


def _answer(request: Request, catalog: Catalog, q: str, found: Suggestions) -> dict:
    urls = Urls.of(catalog, request)
    titles = []
    for uid, path, meta in found.titles:
        uid_value = public_value(meta.get("UID")) if "UID" in catalog.metadata_names else uid
        titles.append({"title": public_value(meta.get("Title")), "@id": urls.url(path), "UID": uid_value,
                       "path": urls.relative(path)})
    return {"@id": request_url(request) + "?" + request.url.query, "q": q,
            "words": [{"word": w} for w in found.words], "titles": titles}


@router.get("/{catalog}/@suggest", response_model=SuggestResult, responses=NOT_MODIFIED,
            openapi_extra={"parameters": SUGGEST_PARAMETERS})
@idempotent
async def suggest_at_catalog(request: Request, catalog: str):
    """Search-as-you-type: completions of the last word of ``q`` from the catalog's lexicon and
    titles starting with ``q``, only from objects the caller may see now (never private, expired
    or future content; docs/api.md, "Suggestions")."""
    q, limit, index = _parameters(request)
    explicit = "index" in request.query_params
    return await conditional_search(request, catalog, lambda: _suggest(request, catalog, q, limit, index, explicit))


@router.get("/suggest", response_model=SuggestResult, responses=NOT_MODIFIED,
            openapi_extra={"parameters": [
                {"name": "catalog", "in": "query", "required": True, "schema": {"type": "string"},
                 "description": "The catalog (site) to suggest from"}, *SUGGEST_PARAMETERS]})
@idempotent
async def suggest(request: Request, catalog: str):
    """The same, the catalog named by the ``catalog`` parameter (as for ``GET /search``)."""
    q, limit, index = _parameters(request, ("catalog",))
    explicit = "index" in request.query_params
    return await conditional_search(request, catalog, lambda: _suggest(request, catalog, q, limit, index, explicit))
