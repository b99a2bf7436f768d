"""The pydantic models of the catalog service's HTTP API.

Both the service and the Plone connector import these, so the two sides cannot drift. Values that
cross the wire are plain JSON; dates travel as ISO 8601 strings with an offset (the connector turns
Zope ``DateTime`` and ``datetime`` into those), and the service converts them per index type exactly
as the matching ZCatalog index would.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

INDEX_TYPES = (
    "FieldIndex",
    "KeywordIndex",
    "BooleanIndex",
    "UUIDIndex",
    "DateIndex",
    "DateRangeIndex",
    "ExtendedPathIndex",
    "PathIndex",
    "ZCTextIndex",
    "DateRecurringIndex",
    "GopipIndex",
)

IndexType = Literal[
    "FieldIndex",
    "KeywordIndex",
    "BooleanIndex",
    "UUIDIndex",
    "DateIndex",
    "DateRangeIndex",
    "ExtendedPathIndex",
    "PathIndex",
    "ZCTextIndex",
    "DateRecurringIndex",
    "GopipIndex",
]

# What the values of a Field/Keyword index are; decides how ranges and sorting compare them.
ValueType = Literal["text", "number", "boolean", "datetime"]

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,62}$"
CATALOG_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"

# Strings that PostgreSQL keeps as text or jsonb, which hold no NUL character: refused (422),
# never stored changed.
NO_NUL_PATTERN = r"^[^\x00]*$"
Text = Annotated[str, Field(pattern=NO_NUL_PATTERN)]
# The codes CatalogSettings.language accepts (BCP 47 primary subtags); the service has a profile
# of each (catalog_service/text/languages.py).
LANGUAGE_CODES = ("ar", "bg", "cs", "da", "de", "el", "en", "es", "fi", "fr", "he", "it", "ja", "km", "ko",
                  "lo", "my", "nl", "no", "pl", "pt", "ru", "sv", "th", "uk", "zh")
# Versions are PostgreSQL bigints.
BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1
Version = Annotated[int, Field(ge=BIGINT_MIN, le=BIGINT_MAX)]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class IndexDeclaration(Model):
    """One index, in the shape Plone's catalog.xml declares it."""

    name: str = Field(pattern=NAME_PATTERN)
    type: IndexType
    # catalog.xml <indexed_attr value="..."/>; defaults to the index name. Only informative for the
    # service: the client extracts the values.
    indexed_attrs: list[Text] = Field(default_factory=list, max_length=16)
    # DateRangeIndex: <property name="since_field"/> and until_field.
    since_field: Text | None = None
    until_field: Text | None = None
    # DateIndex: index_naive_time_as_local (ZCatalog default True).
    index_naive_time_as_local: StrictBool = True
    # DateRangeIndex: treat an open end as the far past/future ("floor"/"ceiling" values).
    precision_value: int | None = None
    # ZCTextIndex: the lexicon's id is informative (the connector refuses a lexicon whose pipeline
    # is not Plone's, the only one the service reproduces). Only Okapi BM25 is scored as ZCatalog
    # scores it; a "Cosine Measure" index would order relevance differently, so it is refused.
    lexicon_id: Text | None = None
    index_type: Literal["Okapi BM25 Rank"] = "Okapi BM25 Rank"
    # Field/Keyword: how ranges and sorts compare values.
    value_type: ValueType = "text"


class CatalogSettings(Model):
    """How the public routes (``/search``, ``/{catalog}/@search``) show a catalog's objects.

    ``public_url``: the site's public address (``https://www.example.org``); an item's ``@id`` is
    it plus the item's path relative to the site. Without it, ``@id`` is the service's own
    address of the catalog plus that path. ``site_path``: the site's physical path (``/plone``);
    without it, the first component of the object's path. ``type_titles``: the title of each
    portal_type (its FTI's title), shown as ``type_title``; a type without one shows its name, as
    plone.restapi does for a type without an FTI. ``timezone``: the IANA name of the Plone
    process's zone (its ``DateTime``'s local zone), where ``@querystring-search``'s "today" and
    relative days begin at midnight. ``language``: the language of the site's content (a BCP 47
    primary subtag, ``de``), for the public search extras only: the letters typo corrections are
    made of, whether corrections apply, the stop words never suggested nor used as corrections;
    None: no language (docs/decisions/0025)."""

    public_url: str | None = Field(default=None, max_length=2000, pattern=r"^https?://[^\s?#]+$")
    site_path: str | None = Field(default=None, max_length=2000, pattern=r"^/[^\s?#]*$")
    type_titles: dict[str, str] = Field(default_factory=dict, max_length=1000)
    timezone: str = Field(default="UTC", max_length=100)
    language: str | None = Field(default=None, max_length=35, description=(
        "The content's language, a BCP 47 primary subtag (lower-cased), one of: " + ", ".join(LANGUAGE_CODES)))

    @field_validator("language")
    @classmethod
    def _known_language(cls, code: str | None) -> str | None:
        if code is None:
            return None
        if code.lower() not in LANGUAGE_CODES:
            raise ValueError(f"{code!r} is no supported language code (a BCP 47 primary subtag); "
                             f"supported: {', '.join(LANGUAGE_CODES)}")
        return code.lower()

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, name: str) -> str:
        try:
            ZoneInfo(name)
        except (ValueError, KeyError, OSError) as exc:  # ZoneInfoNotFoundError is a KeyError
            raise ValueError(f"{name!r} is no IANA time zone name (e.g. Europe/Berlin, UTC)") from exc
        return name


class CatalogCreate(Model):
    id: str = Field(pattern=CATALOG_ID_PATTERN)
    title: Text = Field(default="", max_length=500)
    indexes: list[IndexDeclaration] = Field(default_factory=list, max_length=500)
    metadata: list[Text] = Field(default_factory=list, max_length=500)
    settings: CatalogSettings = Field(default_factory=CatalogSettings)


class SchemaUpdate(Model):
    """Add (or replace) indexes and metadata columns; remove others by name.

    Replacing an index whose declaration changed drops its values (a reindex fills it again).
    Removing an index or a column the catalog does not have is no error (a retried or repeated
    removal is harmless); its leftovers, if any, are dropped all the same."""

    indexes: list[IndexDeclaration] = Field(default_factory=list, max_length=500)
    metadata: list[Text] = Field(default_factory=list, max_length=500)
    remove_indexes: list[Text] = Field(default_factory=list, max_length=500)
    remove_metadata: list[Text] = Field(default_factory=list, max_length=500)
    # Apply only what loses no data, for a transaction that has not committed yet (the connector
    # sends it before the vote, so that its staged entries validate, and the whole update once
    # ZODB has committed): add the indexes and columns the catalog lacks, and replace the
    # declaration of an index that holds no values; the removals, and the changed declarations of
    # indexes that hold values, are left out.
    only_add: StrictBool = False


class CatalogInfo(Model):
    id: str
    title: str
    indexes: list[IndexDeclaration]
    metadata: list[str]
    counter: int
    objects: int
    settings: CatalogSettings = Field(default_factory=CatalogSettings)


class IndexEntry(Model):
    """Catalog one object: its index values and metadata, keyed by uid.

    ``idxs`` names the indexes to update (Plone's partial reindex); with ``idxs`` set, only those
    indexes change and the metadata given replaces only the columns given. Without it, all indexes
    and metadata of the object are replaced.
    """

    op: Literal["index"] = "index"
    uid: Text = Field(min_length=1, max_length=200)
    path: Text = Field(min_length=1, max_length=4000)
    values: dict[Text, Any] = Field(default_factory=dict)
    metadata: dict[Text, Any] = Field(default_factory=dict)
    idxs: list[Text] | None = None
    # Per-object version (e.g. the ZODB tid of the change): an older write never replaces a newer one.
    version: Version = 0


class UnindexEntry(Model):
    op: Literal["unindex"]
    uid: Text = Field(min_length=1, max_length=200)
    version: Version = 0


class Batch(Model):
    """All catalog changes of one ZODB transaction."""

    batch_id: Text = Field(min_length=1, max_length=200)
    entries: list[IndexEntry | UnindexEntry] = Field(default_factory=list)
    # Wipe the catalog's content before applying the entries (clearFindAndRebuild): a boolean
    # only ("yes" is no reason to wipe a catalog).
    clear: StrictBool = False
    # The version of the transaction's snapshot (its entries carry it too). A clear with a version
    # removes only the objects and tombstones of older versions, so that, committed late (by a
    # resolver), it keeps what newer transactions committed in between; without one it removes
    # everything.
    version: Version | None = None


class BatchAppend(Model):
    """More changes of the transaction of a staged batch (``POST .../batches/{batch_id}/append``).

    An entry replaces the staged entry of its uid, an unindex too, so the batch holds what one
    staging of all its entries, the appended ones last, would hold. The batch keeps its ``clear``.
    A transaction that queries while it changes many objects sends each change about once this
    way, rather than its whole batch before every query."""

    entries: list[IndexEntry | UnindexEntry] = Field(default_factory=list)


class BatchResult(Model):
    batch_id: str
    state: Literal["staged", "committed", "aborted"]
    applied: int
    skipped_stale: int = 0
    counter: int
    # WAL position after the commit: send it back as the X-Catalog-Min-LSN header of later
    # queries, and a read replica answers them only once it has replayed this far.
    lsn: str | None = None


class VerifyRequest(Model):
    """Objects as the client sees them, entries as in a batch (``POST /catalogs/{id}/verify``)."""

    entries: list[IndexEntry | UnindexEntry] = Field(default_factory=list)


class TokenRequest(Model):
    """A signed, expiring token for a frontend acting for one user (``POST /catalogs/{id}/tokens``)."""

    principals: list[Text] = Field(max_length=1000)
    ttl: int = Field(default=3600, ge=1, le=86400)
    show_inactive: StrictBool = False


class StagedBatch(Model):
    batch_id: str
    # Seconds since it was (last) staged, by the service's database clock.
    age: float


class StagedBatches(Model):
    """Batches of a catalog staged longer ago than asked, oldest first (at most ``limit``)."""

    batches: list[StagedBatch]


class BatchResolver(Model):
    """Who decides the outcome of a batch a crashed client left staged (docs/decisions/0011).

    ``service``: after ``CATALOG_STAGED_BATCH_TTL``, committed if catalog_txn_outcome records it,
    else aborted. ``client``: the client resolves them (it reads the outcome from ZODB); the
    service still commits recorded ones, and aborts unrecorded ones only after
    ``CATALOG_STAGED_BATCH_ABANDON_TTL``."""

    by: Literal["client", "service"]


class FacetRequest(Model):
    """Count the objects of the whole result per value of one index (docs/api.md, Facets)."""

    index: str = Field(pattern=NAME_PATTERN)
    # How many values to list, most frequent first (``sort``: "count") or in value order
    # ("value"); None: the service's default (100). 0 lists none, ``distinct`` still counts them.
    limit: int | None = Field(default=None, ge=0, le=1000)
    sort: Literal["count", "value"] = "count"


class SearchRequest(Model):
    """A ZCatalog query as Plone sends it, plus the page to return.

    ``query`` keeps ZCatalog's shape: ``{"portal_type": "Document"}``,
    ``{"path": {"query": "/plone/news", "depth": 1}}``, ``sort_on`` / ``sort_order`` /
    ``sort_limit`` / ``b_start`` / ``b_size`` inside the query or here.
    """

    model_config = ConfigDict(extra="forbid")
    query: dict[str, Any] = Field(default_factory=dict)
    metadata: list[Text] | Literal["*"] | None = None
    b_start: int | None = Field(default=None, ge=0, le=2**63 - 1)
    b_size: int | None = Field(default=None, ge=0, le=2**63 - 1)
    # Staged batches of the caller's own transaction whose changes the query must see.
    batch_ids: list[Text] = Field(default_factory=list, max_length=16)
    # Include objects that are not currently effective (Plone's "show inactive"); honoured only
    # for callers whose credential allows it.
    show_inactive: StrictBool = False
    # The last batch the caller knows to be committed in ZODB (the connector keeps its id with the
    # catalog counter in ZODB). If the service has not committed it yet, the answer says
    # ``complete: false``: it is correct for an older state only and must not be cached.
    after_batch: Text | None = Field(default=None, max_length=200)
    # Facet counts to return with the page: index names, or FacetRequests for a limit or order.
    facets: list[str | FacetRequest] = Field(default_factory=list, max_length=16)


class Brain(BaseModel):
    model_config = ConfigDict(extra="allow")
    uid: str
    path: str
    rid: int
    score: int | None = None


class FacetValue(Model):
    # The index value as plain JSON (a string, number or boolean; one keyword of a KeywordIndex).
    value: Any
    # Objects of the whole result (the caller's security and effective-date filter applied) that
    # the query would find with ``index=value`` in place of its own condition on the index.
    count: int


class FacetCounts(Model):
    values: list[FacetValue]
    # How many values have a count above zero (more than ``values`` holds when the limit cut it).
    distinct: int


class SearchResult(Model):
    items_total: int
    b_start: int
    b_size: int | None
    items: list[dict[str, Any]]
    counter: int
    # False when ``after_batch`` is not committed in the catalog yet.
    complete: bool = True
    # Only when the request asked for facets: per index, in the order asked.
    facets: dict[str, FacetCounts] | None = None
    # Only with typo: the query text with the best correction of each corrected word (null when
    # none was corrected), and every corrected word's corrections searched for, best first.
    did_you_mean: str | None = None
    corrections: dict[str, list[str]] | None = None


class PublicSearchRequest(SearchRequest):
    """``POST /search``'s body: a ``SearchRequest`` and the public routes' opt-in extras
    (docs/api.md, "Highlighting" and "Typo tolerance")."""

    highlight: StrictBool | list[Text] | Text | None = Field(
        default=None, description="true (Title, Description, SearchableText, those the catalog has), or "
        "field names (metadata columns, text indexes): snippets with the text query's words in <mark>")
    typo: StrictBool = Field(default=False, description="correct words of the text query that no visible "
                             "object holds; corrected matches follow the exact ones")


class PublicItem(Model):
    """One object in the public contract (``/search``): metadata as plain JSON (public_values)."""

    uid_: str | None = Field(alias="UID", description="the Plone UID (metadata column UID; without one, "
                             "the catalog entry's uid)")
    id_: str = Field(alias="@id", description="the object's public URL (CatalogSettings.public_url)")
    path: str = Field(description="the object's path relative to the site, '' for the site itself")
    score: int | None = Field(default=None, description="ZCatalog's data_record_score_ of a relevance-ordered "
                              "text query")
    metadata: dict[str, Any]
    highlight: dict[str, str] | None = Field(default=None, description="with highlight: field -> HTML snippet "
                                             "(escaped text, matched words in <mark>), fields with a match only")
    corrected: bool | None = Field(default=None, description="with typo: whether the item matches only the "
                                   "corrected query (it follows every exact match)")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class PublicSearchResult(Model):
    """``/search``'s answer: a page (``b_size`` 25 unless asked, at most CATALOG_PUBLIC_MAX_B_SIZE)."""

    items_total: int
    b_start: int
    b_size: int
    items: list[PublicItem]
    # Only when the request asked for facets: per index, in the order asked.
    facets: dict[str, FacetCounts] | None = None
    # Only with typo: the query text with the best correction of each corrected word (null when
    # none was corrected), and every corrected word's corrections searched for, best first.
    did_you_mean: str | None = None
    corrections: dict[str, list[str]] | None = None


class Batching(BaseModel):
    """plone.restapi's batching links; only when the result has more than one page."""

    model_config = ConfigDict(populate_by_name=True)
    id_: str = Field(alias="@id")
    first: str
    last: str
    prev: str | None = None
    next: str | None = None


class RestapiItem(BaseModel):
    """An item of ``@search``: plone.restapi's summary of a brain, plus the ``metadata_fields``
    asked for (plain JSON), ``getPath`` and ``getURL`` among them with ``_all``."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    id_: str = Field(alias="@id")
    type_: str | None = Field(alias="@type")
    title: Any = None
    description: Any = None
    review_state: Any = None
    type_title: str | None = None


class RestapiSearchResult(BaseModel):
    """``/{catalog}/@search``'s answer, as plone.restapi's ``@search`` (a text query that is empty
    once its parentheses are removed, or ``*``, answers ``[]`` as plone.restapi does)."""

    model_config = ConfigDict(populate_by_name=True)
    id_: str = Field(alias="@id")
    items_total: int
    items: list[RestapiItem]
    batching: Batching | None = None
    # Only with typo (as /search's).
    did_you_mean: str | None = None
    corrections: dict[str, list[str]] | None = None


class QuerystringCriterion(BaseModel):
    """A plone.app.querystring criterion: index, operation (its registry name), value."""

    model_config = ConfigDict(extra="allow")
    i: str = Field(description="the index, e.g. portal_type")
    o: str = Field(description="the operation, e.g. plone.app.querystring.operation.selection.any")
    v: Any = Field(default=None, description="the operation's value (a list, a text, a number of days...)")


class QuerystringSearchRequest(BaseModel):
    """plone.restapi's ``@querystring-search`` body. Numbers may come as text, as plone.restapi
    reads them with ``int()``; other keys are ignored as plone.restapi ignores them (Volto sends
    its block's data along)."""

    model_config = ConfigDict(extra="allow")
    query: list[QuerystringCriterion]
    b_start: int | str | None = Field(default=None, description="the first item of the page (0)")
    b_size: int | str | None = Field(default=None, description="items per page (25)")
    sort_on: str | list[str] | None = None
    sort_order: str | None = Field(default=None, description='"descending", or anything else for ascending')
    limit: int | str | None = Field(default=None, description="the most items the result has (items_total "
                                    "counts at most these)")
    metadata_fields: str | list[str] | None = Field(default=None, description="metadata columns to add to "
                                                    "each item; _all for every one")
    fullobjects: bool | int | str | None = Field(default=None, description="refused with 400 when true: the "
                                                 "service holds no objects")


class UniqueValues(Model):
    """An index's distinct values in ZCatalog's order; with ``lengths`` asked for, how many objects
    hold each value (``lengths``, in the same order) and how many the index holds (``objects``,
    ZCatalog's ``numObjects()``: for a DateRangeIndex every object, though it lists no values)."""

    index: str
    values: list[Any]
    lengths: list[int] | None = None
    objects: int | None = None


class TextIndexSize(Model):
    """A ZCTextIndex's distinct words (ZCatalog's ``numObjects()``) and documents (``indexSize()``)."""

    index: str
    words: int
    documents: int


class FieldError(BaseModel):
    """One thing wrong with a request's body or parameters (a 422's ``errors``)."""

    loc: list[str]
    msg: str
    type: str


class Problem(BaseModel):
    """RFC 9457 problem details, the body of every error (``application/problem+json``)."""

    model_config = ConfigDict(extra="allow")
    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    # 422: what did not match the API (at most 20).
    errors: list[FieldError] | None = None
    # /readyz: the migrations not applied yet.
    pending: list[str] | None = None
