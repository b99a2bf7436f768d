"""The service's view of the tool's indexes: IndexDeclarations made from ZCatalog index objects."""

from __future__ import annotations

from catalog_schemas.api import INDEX_TYPES, IndexDeclaration

from .errors import ServiceRejected
from .wire import IsoDate

# Field/Keyword indexes of Plone and common add-ons whose values are not text (the others Plone
# ships hold text: ids, types, states, UUIDs, subjects, languages). Any other index is typed when
# it is first given a value (ServiceCatalogTool._settle_value_types) or, at install, from the
# values the old ZCatalog holds (value_type_from_values).
KNOWN_VALUE_TYPES = {
    "total_comments": "number",  # plone.app.discussion
    "getObjPositionInParent": "number",  # a FieldIndex in sites older than GopipIndex
    "cmf_uid": "number",  # Products.CMFUid
    "getObjSize": "number",
}
TYPED_INDEXES = ("FieldIndex", "KeywordIndex")


def wire_value_type(value) -> str | None:
    """The value type of an extracted (wire) Field/Keyword value; None when it tells nothing."""
    if isinstance(value, list):
        for item in value:
            found = wire_value_type(item)
            if found is not None:
                return found
        return None
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, IsoDate):
        return "datetime"
    return "text"


def value_type_from_values(values) -> str:
    from DateTime import DateTime

    for value in values:
        if isinstance(value, bool):
            return "boolean"
        if isinstance(value, (int, float)):
            return "number"
        if isinstance(value, DateTime):
            return "datetime"
        return "text"
    return "text"


# The pipeline of Plone's plone_lexicon, the only one the service's text module reproduces (its
# splitter with CJK bigrams and its accent-ignoring case normaliser). Another lexicon (ZCatalog's
# plain splitter, HTML-aware splitting, stop words) would split words differently.
PLONE_PIPELINE = (
    "Products.CMFPlone.UnicodeSplitter.splitter.Splitter",
    "Products.CMFPlone.UnicodeSplitter.splitter.I18NNormalizer",
)


def _check_plone_lexicon(index) -> None:
    try:
        lexicon = index.getLexicon()
    except (AttributeError, KeyError, TypeError):  # no such lexicon, or not a lexicon
        lexicon = None
    pipeline = tuple(f"{type(e).__module__}.{type(e).__qualname__}" for e in getattr(lexicon, "_pipeline", ()))
    if pipeline != PLONE_PIPELINE:
        raise ServiceRejected(
            f"index {index.getId()!r}: lexicon {getattr(index, 'lexicon_id', None)!r} splits and normalises"
            f" with {list(pipeline)}; the catalog service reproduces only Plone's plone_lexicon pipeline"
            f" {list(PLONE_PIPELINE)}")


def declaration(index, value_type: str | None = None) -> IndexDeclaration:
    meta_type = index.meta_type
    if meta_type not in INDEX_TYPES:
        raise ServiceRejected(f"index {index.getId()!r}: the catalog service has no {meta_type}")
    name = index.getId()
    fields: dict = {"name": name, "type": meta_type}
    if meta_type in ("FieldIndex", "KeywordIndex", "BooleanIndex", "UUIDIndex", "DateIndex"):
        fields["indexed_attrs"] = list(index.getIndexSourceNames())
    if meta_type in ("FieldIndex", "KeywordIndex"):
        fields["value_type"] = value_type or KNOWN_VALUE_TYPES.get(name, "text")
    if meta_type == "GopipIndex":
        fields["value_type"] = "number"
    if meta_type == "DateIndex":
        fields["index_naive_time_as_local"] = bool(getattr(index, "index_naive_time_as_local", True))
    if meta_type == "DateRangeIndex":
        fields["since_field"] = index.getSinceField()
        fields["until_field"] = index.getUntilField()
        fields["precision_value"] = int(getattr(index, "precision_value", 1) or 1)
    if meta_type == "ZCTextIndex":
        _check_plone_lexicon(index)
        fields["indexed_attrs"] = list(index.getIndexSourceNames())
        fields["lexicon_id"] = getattr(index, "lexicon_id", None)
        # getIndexType() names the class when the index was made with an index_factory.
        index_type = index.getIndexType()
        if index_type not in ("Okapi BM25 Rank", "OkapiIndex"):
            raise ServiceRejected(
                f"index {index.getId()!r}: the catalog service ranks text only as ZCTextIndex's"
                f" 'Okapi BM25 Rank' does, not as {index_type!r}")
        fields["index_type"] = "Okapi BM25 Rank"
    if meta_type in ("ExtendedPathIndex", "PathIndex"):
        attrs = getattr(index, "indexed_attrs", None)
        if attrs:
            fields["indexed_attrs"] = list(attrs)
    if meta_type == "DateRecurringIndex":
        fields["until_field"] = index.getUntilField()
    return IndexDeclaration.model_validate(fields)


def declarations(tool, value_types: dict | None = None) -> list[IndexDeclaration]:
    """The tool's indexes, typed as the tool settled them (``value_types`` overrides)."""
    types = {**(getattr(tool, "_service_value_types", None) or {}), **(value_types or {})}
    return [declaration(tool._catalog.getIndex(name), types.get(name)) for name in tool.indexes()]
