"""The pydantic models of the catalog service's HTTP API.

Both the service and the Plone connector import these, so the two sides cannot drift. Values that
cross the wire are plain JSON; dates travel as ISO 8601 strings with an offset (the connector turns
Zope ``DateTime`` and ``datetime`` into those), and the service converts them per index type exactly
as the matching ZCatalog index would.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

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


class CatalogCreate(Model):
    id: str = Field(pattern=CATALOG_ID_PATTERN)
    title: Text = Field(default="", max_length=500)
    indexes: list[IndexDeclaration] = Field(default_factory=list, max_length=500)
    metadata: list[Text] = Field(default_factory=list, max_length=500)


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


class Brain(BaseModel):
    model_config = ConfigDict(extra="allow")
    uid: str
    path: str
    rid: int
    score: int | None = None


class SearchResult(Model):
    items_total: int
    b_start: int
    b_size: int | None
    items: list[dict[str, Any]]
    counter: int
    # False when ``after_batch`` is not committed in the catalog yet.
    complete: bool = True


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
