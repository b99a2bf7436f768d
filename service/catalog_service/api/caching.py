"""HTTP caching of the public GET searches: ``ETag``, ``Cache-Control``, ``Vary``, and
``If-None-Match`` answered 304 without running the search.

The ETag is strong: a digest of the catalog's state (its id, counter and schema revision, which
every commit moves in the committing transaction), the request (path and sorted query
parameters), the caller's credential (the token carries the caller's principals; a connector's
principals and unrestricted flag are headers) and the current minute (what Anonymous may see
changes with effective and expiry dates, at minute resolution as ZCatalog's DateRangeIndex, and
so do relative dates). Equal tags therefore mean equal answers.

``Cache-Control``: ``private, no-cache`` for callers with a credential (a browser keeps the
answer and revalidates it), ``public, max-age=<public_max_age>`` for Anonymous (0: ``no-cache``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable

from fastapi import Request
from fastapi.responses import Response

from ..settings import Settings
from ..store.search import Answer
from .auth import Credential, identify
from .deps import credential_of

VARY = "Authorization, Origin"


def etag(state: tuple, request: Request, credential: Credential, minute: int) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for part in (repr(state), request.url.path, repr(sorted(request.query_params.multi_items())),
                 repr((credential.bearer, credential.principals_header, credential.unrestricted)), str(minute)):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return f'"{digest.hexdigest()}"'


def matches(if_none_match: str, tag: str) -> bool:
    """RFC 9110 If-None-Match: a list of tags compared weakly, or ``*``."""
    candidates = [c.strip() for c in if_none_match.split(",")]
    return "*" in candidates or any(c.removeprefix("W/") == tag for c in candidates)


def headers(tag: str, credential: Credential, settings: Settings) -> dict[str, str]:
    if credential.bearer:
        control = "private, no-cache"
    elif settings.public_max_age > 0:
        control = f"public, max-age={settings.public_max_age}"
    else:
        control = "public, no-cache"
    return {"etag": tag, "cache-control": control, "vary": VARY}


async def conditional_search(request: Request, name: str, answer: Callable[[], Awaitable[Answer]]) -> Response:
    """Answer a public GET search, or 304 when the caller's copy is current."""
    state = request.app.state
    credential = credential_of(request.headers)
    minute = int(time.time() // 60)
    if_none_match = request.headers.get("if-none-match")
    if if_none_match:
        pool, conn = await state.db.acquire_read(request.headers.get("x-catalog-min-lsn"))
        try:
            catalog, counter = await state.registry.get(conn, name)
        finally:
            await state.db.release_read(pool, conn)
        identify(credential, catalog, state.settings.admin_token)  # a bad or expired token: 401, not 304
        tag = etag((catalog.id, counter, catalog.schema_rev), request, credential, minute)
        if matches(if_none_match, tag):
            return Response(status_code=304, headers=headers(tag, credential, state.settings))
    result = await answer()
    response = Response(result.body, media_type="application/json")
    if result.complete and result.state:
        response.headers.update(headers(etag(result.state, request, credential, minute), credential, state.settings))
    else:
        # An answer for an older state than the caller asked for: never to be kept.
        response.headers.update({"cache-control": "no-store", "vary": VARY})
    return response
