"""``@@catalog-token``: a signed search token for the logged-in user, for a frontend that calls
the catalog service's public routes itself (docs/api.md, "Tokens for the logged-in user").

The token carries the user's principals as the site's catalog computes them for its own searches
(``_listAllowedRolesAndUsers``) and whether the user may see inactive content; the service
signs it with the catalog's token (``POST /catalogs/{id}/tokens``), so a rotation of that token
leaves it valid for the rotation's grace period. Anonymous gets 401: Anonymous needs no token.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from AccessControl import getSecurityManager
from Products.CMFCore.utils import getToolByName
from Products.Five import BrowserView

from .client import get_client

DEFAULT_TTL = 3600
MAX_TTL = 86400  # the service's bound


class CatalogTokenView(BrowserView):
    """JSON ``{token, expires, catalog, search_url}``; ``ttl`` (seconds, 60 to 86400) optional."""

    def __call__(self):
        response = self.request.response
        response.setHeader("Cache-Control", "no-store")
        user = getSecurityManager().getUser()
        if user is None or getToolByName(self.context, "portal_membership").isAnonymousUser():
            return self._problem(401, "Unauthorized", "log in first: a token is for a logged-in user")
        try:
            ttl = int(self.request.form.get("ttl", DEFAULT_TTL))
        except (TypeError, ValueError):
            ttl = -1
        if not 60 <= ttl <= MAX_TTL:
            return self._problem(400, "Bad request", f"ttl must be 60 to {MAX_TTL} seconds")
        catalog = getToolByName(self.context, "portal_catalog")
        catalog_id = catalog.catalog_id()
        client = get_client()
        minted = client.mint_token(catalog_id, list(catalog._listAllowedRolesAndUsers(user)), ttl,
                                   show_inactive=bool(catalog.allow_inactive({})))
        base = client.settings.public_url or client.settings.url
        response.setHeader("Content-Type", "application/json")
        return json.dumps({
            "token": minted["token"],
            "expires": (datetime.now(UTC) + timedelta(seconds=minted["ttl"])).isoformat(timespec="seconds"),
            "catalog": catalog_id,
            "search_url": f"{base}/search?catalog={quote(catalog_id, safe='')}",
        })

    def _problem(self, status: int, title: str, detail: str) -> str:
        response = self.request.response
        response.setStatus(status)
        response.setHeader("Content-Type", "application/problem+json")
        return json.dumps({"title": title, "status": status, "detail": detail})
