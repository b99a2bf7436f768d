"""Compare what ZODB holds with what the service's catalog holds; report drift, optionally repair.

Run it as ``@@catalog-service-verify`` on the site (a POST with ``repair=1`` repairs), or with
``bin/instance run`` or ``zconsole run`` and the script in ``scripts.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from plone.base.utils import base_hasattr, safe_callable
from plone.indexer.interfaces import IIndexableObject
from Products.CMFCore.utils import getToolByName
from zope.component import queryMultiAdapter

from .interfaces import is_service_tool
from .wire import catalog_uid


@dataclass
class DriftReport:
    checked: int = 0
    missing: list[str] = field(default_factory=list)  # in ZODB, not in the catalog
    phantom: list[str] = field(default_factory=list)  # in the catalog, not in ZODB
    stale: dict[str, list[str]] = field(default_factory=dict)  # path -> differing index/column names
    # Entries whose index values the service would not return (only their metadata was compared).
    values_unchecked: int = 0
    repaired: bool = False

    @property
    def clean(self) -> bool:
        return not (self.missing or self.phantom or self.stale)

    def as_dict(self) -> dict:
        return {
            "checked": self.checked,
            "clean": self.clean,
            "missing": self.missing,
            "phantom": self.phantom,
            "stale": self.stale,
            "values_unchecked": self.values_unchecked,
            "repaired": self.repaired,
        }


def _catalogable(portal, tool, apply) -> None:
    """Call ``apply(path, obj)`` for every object of the site a rebuild would catalog, as
    ZopeFindAndApply finds them (one at a time: a large site is never held whole)."""

    def visit(obj, path):
        if obj != tool and base_hasattr(obj, "reindexObject") and safe_callable(obj.reindexObject):
            apply("/".join(obj.getPhysicalPath()), obj)

    visit(portal, "")
    portal.ZopeFindAndApply(portal, search_sub=True, apply_func=visit)


VERIFY_CHUNK = 500


# object_provides lists the dexterity schema interface generated for the object's type, whose
# name carries the type's FTI modification time: it changes when the FTI does, without any
# reindex (ZCatalog's entries go stale the same way). Nobody queries those names, so verify does
# not count that as drift.
GENERATED_INDEX = "object_provides"
GENERATED_PREFIX = "plone.dexterity.schema.generated."


def _without_generated(values) -> set:
    return {v for v in values or () if not (isinstance(v, str) and v.startswith(GENERATED_PREFIX))}


def _only_generated_schemas_differ(tool, client, uid: str, entry: dict) -> bool:
    stored = client.get_object(tool.catalog_id(), uid)
    if stored is None:
        return False
    return (_without_generated(stored.get("indexes", {}).get(GENERATED_INDEX))
            == _without_generated(entry["values"].get(GENERATED_INDEX)))


def verify(portal, repair: bool = False) -> DriftReport:
    """Compare every catalogable object with the service's catalog. The service converts the
    values exactly as it does for indexing and compares them in its stored form.

    The objects go to the service in chunks as they are found (at most ``VERIFY_CHUNK`` entries,
    and no more than the connector's ``chunk_entries`` per request), so memory does not grow
    with the site; ZODB's cache is collected between chunks."""
    tool = getToolByName(portal, "portal_catalog")
    if not is_service_tool(tool):
        raise TypeError("portal_catalog is not the catalog service tool")
    report = DriftReport()
    catalogued = set(tool._all_paths())
    client = tool._client()
    size = min(VERIFY_CHUNK, client.settings.chunk_entries or VERIFY_CHUNK)
    found: set[str] = set()
    chunk: list[dict] = []

    def check() -> None:
        results = client.verify(tool.catalog_id(), chunk)
        entry_of = {entry["uid"]: entry for entry in chunk}
        for uid, result in results.items():
            path = entry_of[uid]["path"]
            if result["missing"]:
                report.missing.append(path)
            elif result["indexes"] or result["metadata"]:
                differing = sorted(result["indexes"] + result["metadata"])
                if GENERATED_INDEX in differing and _only_generated_schemas_differ(tool, client, uid, entry_of[uid]):
                    differing.remove(GENERATED_INDEX)
                if differing:
                    report.stale[path] = differing
        chunk.clear()
        jar = getattr(portal, "_p_jar", None)
        if jar is not None:
            jar.cacheGC()

    def compare(path: str, obj) -> None:
        report.checked += 1
        found.add(path)
        if path not in catalogued:
            report.missing.append(path)
            return
        wrapper = obj
        if not IIndexableObject.providedBy(obj):
            wrapper = queryMultiAdapter((obj, tool), IIndexableObject) or obj
        values, metadata = tool._extract(wrapper)
        chunk.append({"op": "index", "uid": catalog_uid(path), "path": path,
                      "values": values, "metadata": metadata or {}})
        if len(chunk) >= size:
            check()

    _catalogable(portal, tool, compare)
    if chunk:
        check()
    report.missing.sort()
    report.phantom = sorted(catalogued - found)
    if repair and not report.clean:
        for path in report.phantom:
            tool.uncatalog_object(path)
        for path in report.missing + list(report.stale):
            tool.catalog_object(portal.unrestrictedTraverse(path), path)
        report.repaired = True
    return report
