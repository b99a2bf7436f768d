"""Cross-origin calls from browsers to the public routes (``/search``, ``/{catalog}/@...``).

Origins are allowed by the ``cors_origins`` setting (``CATALOG_CORS_ORIGINS``, a JSON list):
empty, the default, allows none; ``"*"`` allows every origin. No route relies on cookies, so no
answer carries ``Access-Control-Allow-Credentials``; a bearer token goes in the ``Authorization``
header, which a preflight allows. Routes of the connector and the operators never answer a
browser from another origin.

A plain ASGI layer in front of the application (as app.Observe, for the same reason): a
preflight (``OPTIONS`` with ``Access-Control-Request-Method``) is answered 204 here, an
``OPTIONS`` on a public route 204 with ``Allow``; every answer of a public route gets
``Vary: Origin``, and ``Access-Control-Allow-Origin`` when the origin is allowed.
"""

from __future__ import annotations

import re

from ..settings import Settings
from .problems import problem

PUBLIC_PATH = re.compile(r"^/(search/?|suggest/?|[^/]+/@[^/]+(/.*)?)$")
METHODS = "GET, POST, OPTIONS"
# What a frontend sends: a bearer token, a JSON body, a revalidation, its read-your-writes position.
ALLOWED_HEADERS = "Authorization, Content-Type, If-None-Match, X-Catalog-Min-Lsn"
EXPOSED_HEADERS = "ETag"


def is_public(path: str) -> bool:
    return PUBLIC_PATH.match(path) is not None


def _add_vary(headers: list, *names: str) -> list:
    """Vary merged with what the answer already varies by."""
    existing = []
    rest = []
    for key, value in headers:
        if key.lower() == b"vary":
            existing.extend(v.strip() for v in value.decode("latin-1").split(",") if v.strip())
        else:
            rest.append((key, value))
    merged = existing + [n for n in names if n.lower() not in {e.lower() for e in existing}]
    rest.append((b"vary", ", ".join(merged).encode("latin-1")))
    return rest


class Cors:
    def __init__(self, app, settings: Settings):
        self.app = app
        self.origins = frozenset(settings.cors_origins)
        self.max_age = str(settings.cors_max_age)

    def allowed(self, origin: str | None) -> str | None:
        """The Access-Control-Allow-Origin value for ``origin``, or None."""
        if not origin:
            return None
        if origin in self.origins:
            return origin
        return "*" if "*" in self.origins else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope["headers"]}
        origin = headers.get(b"origin", b"").decode("latin-1") or None
        allow = self.allowed(origin)
        if scope["method"] == "OPTIONS":
            await self._options(scope, receive, send, origin, allow, headers)
            return

        async def send_with_cors(message):
            if message["type"] == "http.response.start":
                out = _add_vary(list(message.get("headers", [])), "Origin")
                if allow is not None:
                    out.append((b"access-control-allow-origin", allow.encode("latin-1")))
                    out.append((b"access-control-expose-headers", EXPOSED_HEADERS.encode()))
                message = {**message, "headers": out}
            await send(message)

        await self.app(scope, receive, send_with_cors)

    async def _options(self, scope, receive, send, origin, allow, headers):
        preflight = origin is not None and b"access-control-request-method" in headers
        if preflight and allow is None:
            response = problem(403, "Origin not allowed",
                               f"{origin} may not call this service from a browser (setting cors_origins)",
                               scope["path"])
            response.headers["vary"] = "Origin"
            await response(scope, receive, send)
            return
        out = [(b"allow", METHODS.encode()), (b"vary", b"Origin, Access-Control-Request-Method, "
                                                       b"Access-Control-Request-Headers")]
        if preflight:
            out += [(b"access-control-allow-origin", allow.encode("latin-1")),
                    (b"access-control-allow-methods", METHODS.encode()),
                    (b"access-control-allow-headers", ALLOWED_HEADERS.encode()),
                    (b"access-control-max-age", self.max_age.encode())]
        await send({"type": "http.response.start", "status": 204, "headers": out})
        await send({"type": "http.response.body", "body": b""})
