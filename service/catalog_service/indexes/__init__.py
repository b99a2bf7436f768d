"""The index type registry: one class per ZCatalog index type. Adding a type touches its module
and this table."""

from __future__ import annotations

from catalog_schemas.api import IndexDeclaration

from ..errors import BadRequest
from .base import MISSING, BadValue, Index, IndexQuery, QueryContext, RowsOverlay
from .dateindex import DateIndex, DateRecurringIndex
from .path import ExtendedPathIndex, PathIndex
from .simple import BooleanIndex, DateRangeIndex, GopipIndex
from .text import ZCTextIndex
from .unindex import FieldIndex, KeywordIndex, UUIDIndex

INDEX_TYPES: dict[str, type[Index]] = {
    cls.type_name: cls
    for cls in (
        FieldIndex,
        KeywordIndex,
        BooleanIndex,
        UUIDIndex,
        DateIndex,
        DateRangeIndex,
        ExtendedPathIndex,
        PathIndex,
        ZCTextIndex,
        DateRecurringIndex,
        GopipIndex,
    )
}


def make_index(decl: IndexDeclaration) -> Index:
    cls = INDEX_TYPES.get(decl.type)
    if cls is None:
        raise BadRequest(f"unknown index type {decl.type!r}")
    if decl.type == "DateRangeIndex" and not (decl.since_field and decl.until_field):
        raise BadRequest(f"DateRangeIndex {decl.name!r} needs since_field and until_field")
    return cls(decl)


__all__ = ["INDEX_TYPES", "MISSING", "BadValue", "Index", "IndexQuery", "QueryContext", "RowsOverlay", "make_index"]
