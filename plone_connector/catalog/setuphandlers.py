"""Install: swap portal_catalog for the service tool; uninstall: swap back to a ZCatalog.

The new tool takes over the old tool's ``_catalog`` (its index objects and metadata columns, emptied)
and its lexicons, so it has exactly the indexes, with all their properties, that the old one had,
including those other add-ons' catalog.xml added. (A catalog.xml round trip would not do: some
index types, e.g. DateRecurringIndex, do not export what they need to be created again.) The moved
``_catalog`` becomes a ServiceCatalog, whose index objects read their data from the service
(indexes.py), and a plain ZCatalog Catalog again on uninstall.
"""

from __future__ import annotations

import logging
import os

import transaction
from Acquisition import aq_base, aq_inner, aq_parent
from BTrees.IIBTree import IIBTree
from BTrees.Length import Length
from Products.CMFPlone.CatalogTool import CatalogTool
from Products.ZCatalog.Catalog import Catalog

from catalog_schemas.api import CatalogCreate

from . import outcomes
from .client import get_client
from .errors import ServiceRejected
from .indexes import ServiceCatalog
from .schema import declarations
from .site_settings import site_settings
from .tool import ServiceCatalogTool

logger = logging.getLogger("plone_connector.catalog")

TOOL_ID = "portal_catalog"
SERVICE_TOOL_CLASS = "plone_connector.catalog.tool.ServiceCatalogTool"
PLONE_TOOL_CLASS = "Products.CMFPlone.CatalogTool.CatalogTool"


def _transfer(old, new) -> None:
    """Move the definitions (indexes, columns, lexicons) from ``old`` to ``new``, without data."""
    old = aq_base(old)
    old._catalog.clear()  # in the old tool's context, where ZCTextIndex finds its lexicon
    catalog = aq_base(old._catalog)
    _set_catalog_class(catalog, ServiceCatalog if isinstance(aq_base(new), ServiceCatalogTool) else Catalog)
    new._catalog = catalog
    for object_id in list(old.objectIds()):
        sub = aq_base(old._getOb(object_id))
        old._delObject(object_id, suppress_events=True)
        new._setObject(object_id, sub, suppress_events=True)


def _set_catalog_class(catalog, cls) -> None:
    if type(catalog) is not cls:
        catalog.__class__ = cls
        catalog._p_changed = True  # the class is part of the stored record


def _make_service_catalog(tool) -> None:
    """Make the ``_catalog`` of a service tool already in ZODB a ServiceCatalog."""
    base = aq_base(tool)
    _set_catalog_class(aq_base(base._catalog), ServiceCatalog)
    # A stored reference names the class of the object it points to, and a connection builds
    # the ghost of a referenced object from that class: unless the tool is written again, a
    # fresh ZODB cache (a restart) would load its _catalog as the old class. Written even when
    # _catalog is a ServiceCatalog here: a connection that cached it before another one stored
    # it as a Catalog still has it as a ServiceCatalog, while the stored reference says Catalog.
    base._p_changed = True


def _value_types(catalog) -> dict[str, str]:
    """Field/Keyword value types from the values a ZCatalog already holds (numbers sort as numbers)."""
    from .schema import value_type_from_values

    found = {}
    for name in catalog.indexes():
        index = catalog._catalog.getIndex(name)
        if index.meta_type not in ("FieldIndex", "KeywordIndex"):
            continue
        forward = getattr(index, "_index", None)
        if forward is None or not len(forward):
            continue
        found[name] = value_type_from_values([forward.minKey()])
    return found


def _keep_counter(old, new) -> None:
    """The new tool goes on counting from the old tool's counter: caches keyed on it (the query
    cache, plone.app.caching's ETags) must never see a counter value again for another state."""
    counter = getattr(aq_base(old), "_counter", None)
    if counter is not None:
        new._counter = counter


def _swap(portal, new_tool):
    old = aq_base(getattr(portal, TOOL_ID))
    sm = portal.getSiteManager()
    registrations = [r for r in sm.registeredUtilities() if aq_base(r.component) is old]
    portal._delObject(TOOL_ID, suppress_events=True)
    portal._setObject(TOOL_ID, new_tool, suppress_events=True)
    for registration in registrations:
        sm.registerUtility(new_tool, registration.provided, registration.name)
    return getattr(portal, TOOL_ID)


def _set_toolset(portal, dotted: str) -> None:
    # Re-running Plone's toolset step replaces a tool whose class differs from the registry's.
    setup = getattr(portal, "portal_setup", None)
    if setup is not None:
        registry = setup.getToolsetRegistry()
        registry.addRequiredTool(TOOL_ID, dotted)


def install_service_catalog(portal, catalog_id: str | None = None) -> ServiceCatalogTool:
    current = getattr(portal, TOOL_ID)
    if isinstance(aq_base(current), ServiceCatalogTool):
        ensure_service_catalog(current)
        _make_service_catalog(current)
        return current
    value_types = _value_types(current)
    old = aq_base(current)
    expected = len(old._catalog)  # the rebuild's estimate of its objects, for its progress
    tool = ServiceCatalogTool()
    tool.service_catalog_id = catalog_id or os.environ.get("CATALOG_SERVICE_CATALOG_ID") or portal.getId()
    tool._service_value_types = value_types
    # Here, so that the first claims do not write the tool.
    tool._catalog_claims = IIBTree()
    tool._catalog_claim_count = Length()
    tool = _swap(portal, tool)
    _transfer(old, tool)
    _keep_counter(old, tool)
    _set_toolset(portal, SERVICE_TOOL_CLASS)
    ensure_service_catalog(tool, value_types)
    # One batch (clear + every object) in this transaction, sent ahead in chunks on a large site:
    # the site's catalog appears at commit.
    tool._clear_find_and_rebuild(expected=expected)
    return tool


def ensure_service_catalog(tool, value_types: dict | None = None) -> None:
    client = get_client()
    catalog_id = tool.catalog_id()
    spec = CatalogCreate(
        id=catalog_id,
        title=aq_parent(aq_inner(tool)).Title() or catalog_id,
        indexes=declarations(tool, value_types),
        metadata=list(tool.schema()),
    )
    try:
        client.create_catalog(spec)
        # The catalog's own token in the answer is not kept (no secret goes into ZODB or the log):
        # docs/deploy.md, "Catalog tokens", gives the operator one.
        logger.info("created catalog %s in the catalog service; for a catalog token instead of this "
                    "credential: catalog-service catalog rotate-token %s", catalog_id, catalog_id)
    except ServiceRejected as exc:
        if exc.status != 409:
            raise
        client.update_schema(catalog_id, tool.schema_update())
    push_site_settings(tool)


def push_site_settings(tool) -> None:
    """Give the service's catalog what the connector knows of its site (site_settings.py): its
    path, type titles, time zone and, while the catalog has none, its public address and language. A refusal
    is logged, not raised: the public routes need the settings, the site's own catalog does not."""
    client = get_client()
    catalog_id = tool.catalog_id()
    portal = aq_parent(aq_inner(tool))
    try:
        changes = site_settings(portal, client.get_settings(catalog_id))
        client.update_settings(catalog_id, changes)
    except ServiceRejected as exc:
        logger.warning("could not set the settings of catalog %s in the catalog service (%s); set them with "
                       "PATCH /catalogs/%s/settings", catalog_id, exc, catalog_id)
        return
    logger.info("catalog %s settings: %s", catalog_id,
                ", ".join(f"{k}={v!r}" for k, v in changes.items() if k != "type_titles"))


def uninstall_service_catalog(portal) -> CatalogTool:
    """Put a ZCatalog back, rebuilt from ZODB; the site's catalog in the service is dropped once
    this transaction has committed (docs/connector.md: nothing keeps it up to date any more)."""
    current = getattr(portal, TOOL_ID)
    if not isinstance(aq_base(current), ServiceCatalogTool):
        return current
    catalog_id = current.catalog_id()
    old = aq_base(current)
    tool = _swap(portal, CatalogTool())
    _transfer(old, tool)
    _keep_counter(old, tool)
    _set_toolset(portal, PLONE_TOOL_CLASS)
    tool.clearFindAndRebuild()
    # Only after the commit: an aborted uninstall leaves the site on the service's catalog.
    transaction.get().addAfterCommitHook(_drop_service_catalog, args=(catalog_id,))
    return tool


def _drop_service_catalog(committed: bool, catalog_id: str) -> None:
    if not committed:
        return
    outcomes.unwatch(catalog_id)  # its staged batches go with it
    try:
        get_client().drop_catalog(catalog_id)
    except ServiceRejected as exc:
        if exc.status == 404:  # dropped already
            return
        # A 403: the connector holds the catalog's own credential, and dropping needs the admin's.
        logger.warning("uninstalled, but could not drop catalog %s in the catalog service (%s); "
                       "drop it with the admin credential: DELETE /catalogs/%s", catalog_id, exc, catalog_id)
    except Exception:
        # The uninstall is committed; the service's catalog is only left over.
        logger.exception("uninstalled, but could not drop catalog %s in the catalog service", catalog_id)
    else:
        logger.info("dropped catalog %s in the catalog service", catalog_id)


def upgrade_index_views(context):
    """Profile version 2: the index objects of a site installed before read from the service."""
    portal = aq_parent(aq_inner(context))
    tool = getattr(portal, TOOL_ID)
    if isinstance(aq_base(tool), ServiceCatalogTool):
        _make_service_catalog(tool)


def upgrade_site_settings(context):
    """Profile version 3: the service's catalog gets the site's settings (push_site_settings)."""
    portal = aq_parent(aq_inner(context))
    tool = getattr(portal, TOOL_ID)
    if isinstance(aq_base(tool), ServiceCatalogTool):
        push_site_settings(tool)


def install(context):
    install_service_catalog(aq_parent(aq_inner(context)))


def uninstall(context):
    uninstall_service_catalog(aq_parent(aq_inner(context)))
