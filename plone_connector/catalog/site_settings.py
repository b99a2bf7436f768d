"""The catalog settings the connector can tell from its site, for the service's public routes
(``/search``, ``@search``, ``@querystring-search``; docs/api.md, "Catalog settings").

- ``site_path``: the site's physical path;
- ``type_titles``: each portal_type's title (its FTI's), shown as ``type_title``;
- ``timezone``: the zone of this Zope process, where plone.app.querystring's "today" begins
  (``DateTime()`` is in the process's local zone): the ``TZ`` environment variable, else the
  system's zone (``/etc/localtime``, ``/etc/timezone``), else the site's
  ``plone.portal_timezone``; left as the service's default (UTC) when none names an IANA zone;
- ``public_url``: the site's ``absolute_url()`` when it is a real address (a request's host, not
  the ``nohost`` or ``foo`` Zope names without one, as in a script), and only while the catalog
  has none: an operator's choice (a frontend's address) is kept;
- ``language``: the primary subtag of the site's default language (``plone.default_language``:
  ``pt-br`` gives ``pt``) when the service knows the language, and only while the catalog has
  none, like the public address: it changes only the public search extras (typo corrections, stop
  words of suggestions; docs/decisions/0025), and an operator may have chosen otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from catalog_schemas.api import LANGUAGE_CODES, CatalogSettings

MAX_TYPE_TITLES = 1000  # CatalogSettings.type_titles holds at most this many
LOCALTIME = Path("/etc/localtime")
TIMEZONE_FILE = Path("/etc/timezone")
# The hosts Zope names when no request came in: ZPublisher's own (a script, a test) and
# Testing.makerequest's (``zconsole run``, an instance script).
PLACEHOLDER_HOSTS = ("nohost", "foo")


def _zone_name(name: str | None) -> str | None:
    """``name`` if it is an IANA zone name the service accepts, else None."""
    if not name:
        return None
    name = name.strip().removeprefix(":")
    try:
        CatalogSettings(timezone=name)
    except ValueError:
        return None
    return name


def _system_zone(localtime: Path = LOCALTIME, timezone_file: Path = TIMEZONE_FILE) -> str | None:
    try:
        target = os.readlink(localtime)
    except OSError:
        target = ""
    if "zoneinfo/" in target:
        found = _zone_name(target.rsplit("zoneinfo/", 1)[1])
        if found:
            return found
    try:
        return _zone_name(timezone_file.read_text().strip())
    except OSError:
        return None


def _registry_text(portal, name: str) -> str | None:
    """The site's registry record ``name`` if it is text."""
    try:
        from plone.registry.interfaces import IRegistry
        from zope.component import queryUtility
    except ImportError:
        return None
    registry = queryUtility(IRegistry, context=portal)
    value = registry.get(name) if registry is not None else None
    return value if isinstance(value, str) else None


def _registry_zone(portal) -> str | None:
    return _zone_name(_registry_text(portal, "plone.portal_timezone"))


def process_timezone(portal=None, environ=os.environ, localtime: Path = LOCALTIME,
                     timezone_file: Path = TIMEZONE_FILE) -> str | None:
    """The IANA name of this process's zone, if it can be told (see the module's docstring)."""
    return (_zone_name(environ.get("TZ")) or _system_zone(localtime, timezone_file)
            or (_registry_zone(portal) if portal is not None else None))


def public_url_of(portal) -> str | None:
    url = portal.absolute_url()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.hostname in PLACEHOLDER_HOSTS:
        return None
    if parts.query or parts.fragment or any(ch.isspace() for ch in url):
        return None
    return url.rstrip("/")


def language_of(portal) -> str | None:
    """The primary subtag of the site's default language, if the service has a profile for it."""
    value = _registry_text(portal, "plone.default_language")
    if value is None:
        return None
    primary = value.replace("_", "-").split("-", 1)[0].strip().lower()
    return primary if primary in LANGUAGE_CODES else None


def type_titles_of(portal) -> dict[str, str]:
    types = getattr(portal, "portal_types", None)
    if types is None:
        return {}
    titles = {fti.getId(): str(fti.Title()) for fti in types.objectValues()}
    return dict(sorted(titles.items())[:MAX_TYPE_TITLES])


def site_settings(portal, current: CatalogSettings) -> dict:
    """The settings to PATCH on the catalog whose settings are ``current``."""
    changes: dict = {"site_path": "/".join(portal.getPhysicalPath()) or "/", "type_titles": type_titles_of(portal)}
    zone = process_timezone(portal)
    if zone:
        changes["timezone"] = zone
    url = public_url_of(portal)
    if url and not current.public_url:
        changes["public_url"] = url
    language = language_of(portal)
    if language and not current.language:
        changes["language"] = language
    return changes
