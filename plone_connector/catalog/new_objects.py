"""Whether an object is new in the current transaction (ZODB's connection state, no Plone)."""

from __future__ import annotations

from Acquisition import aq_base


def created_in_this_transaction(obj) -> bool:
    """Whether ``obj`` was added to the database in the current transaction (or not at all yet)."""
    base = aq_base(obj)
    oid = getattr(base, "_p_oid", None)
    if oid is None:
        return True
    jar = getattr(base, "_p_jar", None)
    if jar is None or oid in getattr(jar, "_added", {}) or oid in getattr(jar, "_creating", {}):
        return True
    # After a savepoint (plone.api's create makes one) new objects are the savepoint storage's.
    savepoint_storage = getattr(jar, "_savepoint_storage", None)
    return savepoint_storage is not None and oid in getattr(savepoint_storage, "creating", {})
