"""Dependencies shared by the routers: settings, database, catalog registry, the caller."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TypeVar

import orjson
from fastapi import Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from ..planner.plan import Limits
from ..settings import Settings
from .auth import Credential

M = TypeVar("M", bound=BaseModel)

# Dependencies are coroutines: FastAPI runs plain functions in a thread pool, a thread hop per
# dependency per request.

async def settings(request: Request) -> Settings:
    return request.app.state.settings


def limits_of(s: Settings) -> Limits:
    return Limits(max_b_size=s.max_b_size, max_unbatched=s.max_unbatched, max_list_length=s.max_list_length,
                  max_text_length=s.max_text_length, max_query_terms=s.max_query_terms,
                  relevance_top=s.relevance_top, relevance_candidates=s.relevance_candidates,
                  relevance_generic_plan=s.relevance_generic_plan)


def public_limits_of(s: Settings) -> Limits:
    """The limits of a caller without the service credential: the cost bounds on top."""
    return replace(limits_of(s), max_text_terms=s.public_max_text_terms, max_globs=s.public_max_globs,
                   max_glob_words=s.public_max_glob_words)


def limits_for(request: Request, trusted: bool = True) -> Limits:
    state = request.app.state
    name = "limits" if trusted else "public_limits"
    lim = getattr(state, name, None)
    if lim is None:
        lim = (limits_of if trusted else public_limits_of)(state.settings)
        setattr(state, name, lim)
    return lim


def credential_of(headers: Mapping[str, str]) -> Credential:
    """The caller's credential, from the request headers alone."""
    bearer = None
    malformed = False
    authorization = headers.get("authorization")
    if authorization is not None:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            bearer = value.strip()
        else:
            malformed = True  # refused (auth.identify), never taken for Anonymous
    return Credential(bearer=bearer, principals_header=headers.get("x-catalog-principals"),
                      unrestricted=(headers.get("x-catalog-unrestricted") or "").strip() in ("1", "true", "yes"),
                      malformed=malformed)


async def credential(
    authorization: str | None = Header(default=None),
    x_catalog_principals: str | None = Header(default=None),
    x_catalog_unrestricted: str | None = Header(default=None),
) -> Credential:
    # Declared as headers so that they appear in the OpenAPI description of every route.
    return credential_of({"authorization": authorization, "x-catalog-principals": x_catalog_principals,
                          "x-catalog-unrestricted": x_catalog_unrestricted})


# ``openapi_extra`` for routes that read the credential with :func:`credential_of`.
HEADERS = {"parameters": [
    {"name": name, "in": "header", "required": False, "schema": {"type": "string"}}
    for name in ("authorization", "x-catalog-principals", "x-catalog-unrestricted")
]}


def _inline_defs(schema: dict) -> dict:
    """``schema`` with its ``#/$defs/...`` references replaced by the definitions: inside an
    OpenAPI document such a reference would point at the document's root, not the schema's."""
    defs = schema.pop("$defs", {})

    def resolve(node, within: tuple[str, ...] = ()):
        if isinstance(node, dict):
            name = node.get("$ref", "").removeprefix("#/$defs/")
            if name in defs and len(node) == 1:
                if name in within:
                    raise ValueError(f"{name} is recursive: its schema cannot be inlined")
                return resolve(defs[name], (*within, name))
            return {key: resolve(value, within) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item, within) for item in node]
        return node

    return resolve(schema)


def body_schema(model: type[BaseModel]) -> dict:
    """``openapi_extra`` describing a JSON request body that the route reads with :func:`read_body`."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": _inline_defs(model.model_json_schema())}}}}


async def read_body(request: Request, model: type[M]) -> M:
    """The request body validated as ``model``.

    For the hot routes (searches, batches): FastAPI's own body handling parses the JSON with the
    standard library, then validates the Python objects. Here orjson parses it and pydantic
    validates the result: for a batch of Plone-like entries that is 14 µs an entry against 18 for
    pydantic's own JSON parser, whose ``Any`` values (index values, metadata) are the slow part.
    A body orjson refuses goes to pydantic's parser, which reports the error as FastAPI does (and
    accepts what orjson alone refuses, such as integers beyond 64 bits). Errors are reported as
    FastAPI reports them.
    """
    raw = await request.body()
    try:
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return model.model_validate_json(raw)
        return model.model_validate(parsed)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from exc


def json_response(body, status_code: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status_code, media_type="application/json")
