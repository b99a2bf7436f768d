"""A scoped key's filter, checked when the key is made (planner.plan applies it to every search).

The filter is a ZCatalog query of index conditions alone: what the request shapes (sorting,
batching) and what the server decides (``allowedRolesAndUsers``: the key's principals) are no part
of it, nor are text indexes (a key for "one section, some types" needs none, and a text condition
would cost every search the words' expansion). It must plan without error on the catalog's
indexes as they are, so that a key never fails on its first search.
"""

from __future__ import annotations

from typing import Any

from ..errors import QueryError
from ..indexes.text import ZCTextIndex
from .plan import RESERVED, SECURITY_INDEX, UNRESTRICTED, CatalogSchema, Limits, plan_search


def check_filter(scope: dict[str, Any], schema: CatalogSchema, limits: Limits) -> None:
    """Raise QueryError (400) naming what in ``scope`` no key filter may hold."""
    valid = sorted(name for name, index in schema.indexes.items()
                   if name != SECURITY_INDEX and not isinstance(index, ZCTextIndex))
    for name in scope:
        if name in RESERVED:
            raise QueryError(f"filter: {name!r} is no index condition; sorting and batching are the request's",
                             parameter="filter", valid=valid)
        if name == SECURITY_INDEX:
            raise QueryError(f"filter: {SECURITY_INDEX!r} is decided by the server; give the key's principals "
                             f"instead", parameter="filter", valid=valid)
        index = schema.indexes.get(name)
        if index is None:
            raise QueryError(f"filter: the catalog has no index {name!r}", parameter="filter", valid=valid)
        if isinstance(index, ZCTextIndex):
            raise QueryError(f"filter: {name!r} is a text index; a key's filter takes other indexes only",
                             parameter="filter", valid=valid)
        if _selects_nothing_in_particular(scope[name]):
            # ZCatalog ignores an empty condition (an index not first in its order plans to no
            # condition at all): the key would see the whole catalog.
            raise QueryError(f"filter: {name!r} has no value to restrict to ({scope[name]!r})", parameter="filter")
    plan = plan_search(scope, schema, limits, UNRESTRICTED)
    if plan.deferred_error is not None:
        raise QueryError(f"filter: {plan.deferred_error.detail}", parameter="filter")


def _selects_nothing_in_particular(value: Any) -> bool:
    """An empty condition: None, an empty string or list, or a record whose query is one of them
    or a list holding only None."""
    if isinstance(value, dict):
        if "query" not in value:
            return True
        value = value["query"]
    if isinstance(value, list | tuple):
        return all(v is None or v == "" for v in value)
    return value is None or value == ""
