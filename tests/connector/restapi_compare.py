"""Comparing plone.restapi's answers with the service's (test_restapi_compatibility.py,
test_restapi_querystring.py)."""

from __future__ import annotations

# Metadata whose value is a counter of the site, not of the content: portal_uidhandler numbers
# objects in the order a site made them, and the tests before these make other objects on the
# stock site than on the connector's, so the same content has other numbers on the two sites.
# The service answers what the connector's site holds (the brains' own comparison, in
# test_differential_*, checks that).
SITE_COUNTERS = frozenset({"cmf_uid"})


def difference(stock, ours, where: str = "") -> list[str]:
    """Where two answers differ, briefly (for the failure message)."""
    if isinstance(stock, dict) and isinstance(ours, dict):
        found = []
        for key in sorted(set(stock) | set(ours)):
            if key not in stock or key not in ours:
                found.append(f"{where}.{key}: only in {'ours' if key not in stock else 'stock'}")
            elif key not in SITE_COUNTERS:
                found += difference(stock[key], ours[key], f"{where}.{key}")
        return found
    if isinstance(stock, list) and isinstance(ours, list) and len(stock) == len(ours):
        return [d for i, (a, b) in enumerate(zip(stock, ours, strict=True)) for d in difference(a, b, f"{where}[{i}]")]
    return [] if stock == ours else [f"{where}: stock {stock!r}, ours {ours!r}"]


USE_RESTAPI = "plone.restapi: Use REST API"


def grant_restapi_on_stock() -> tuple[list[str], bool]:
    """Grant on the stock site what plone.restapi's profile grants (the layer does not install it
    there); returns the permission's settings before, for ``restore_restapi_on_stock``."""
    from tests.connector.sites import STOCK, on_site

    with on_site(STOCK) as site:
        saved = ([r["name"] for r in site.rolesOfPermission(USE_RESTAPI) if r["selected"]],
                 bool(site.acquiredRolesAreUsedBy(USE_RESTAPI)))
        site.manage_permission(USE_RESTAPI, ["Anonymous", "Authenticated", "Manager"], acquire=True)
    return saved


def restore_restapi_on_stock(saved: tuple[list[str], bool]) -> None:
    from tests.connector.sites import STOCK, on_site

    with on_site(STOCK) as site:
        site.manage_permission(USE_RESTAPI, saved[0], acquire=saved[1])
