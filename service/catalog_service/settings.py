"""All settings of the service, in one class; each can be set from the environment (prefix ``CATALOG_``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field, NonNegativeInt
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CATALOG_", env_file=".env", extra="ignore")

    # PostgreSQL: DATABASE_URL, or CATALOG_DATABASE_URL (docker-compose.yml's name; the command line
    # refuses the two set to different values). Empty: start an embedded PostgreSQL.
    database_url: str = Field(default="", validation_alias=AliasChoices("DATABASE_URL", "CATALOG_DATABASE_URL"))
    # Optional read replica(s) for queries; writes always go to database_url.
    replica_urls: list[str] = Field(default_factory=list)
    # Where the embedded PostgreSQL keeps its data when no database_url is given.
    embedded_pgdata: Path = Path(".pgdata/service")

    # Where `serve` listens (0.0.0.0 in a container: 127.0.0.1 there is reachable from inside only).
    host: str = "127.0.0.1"
    port: int = 8080
    # Connections per worker to the primary (and to each replica).
    pool_min_size: int = 2
    pool_max_size: int = 10
    # Disable asyncpg's statement cache behind PgBouncer in transaction mode.
    statement_cache_size: int = 512
    # Seconds to open a connection to PostgreSQL; past it the request is answered 503.
    connect_timeout: float = Field(default=5.0, gt=0)
    # Seconds a statement may run before PostgreSQL cancels it.
    statement_timeout: float = 10.0
    # Totals kept per worker for repeated queries, used while the catalog's counter stands
    # (store/search.py CountCache); 0 turns the cache off.
    count_cache_size: int = Field(default=10000, ge=0)
    # Facet counts (with their total) kept per worker on the same terms (docs/decisions/0019); an
    # entry holds up to 16 facets of 1,000 values each.
    facet_cache_size: int = Field(default=1000, ge=0)
    # Whole answers (page, total, facet counts) of repeated searches of up to PAGE_CACHE_MAX_ROWS
    # rows, kept per worker on the same terms (store/search.py); 0 (the default) turns it off: an
    # entry can hold 100 rows of metadata, so a size is a memory budget to choose (decision 0006).
    page_cache_size: int = Field(default=0, ge=0)
    # PostgreSQL work_mem of the service's sessions: the sort of a long unbatched listing or of
    # relevance scores must stay in memory (the server default, 4MB, spills them to disk).
    work_mem: str = Field(default="32MB", pattern=r"^[0-9]+ ?(kB|MB|GB)$")
    # Building a catalog's deferred indexes after a bulk load (POST /catalogs/{id}/indexes/build):
    # this many indexes at a time, each with this maintenance_work_mem (a GIN build collects its
    # entries in it, a B-tree build sorts in it).
    index_builders: int = Field(default=2, ge=1, le=16)
    index_build_memory: str = Field(default="512MB", pattern=r"^[0-9]+ ?(kB|MB|GB)$")

    # Bearer token of operators: create/drop catalogs, and connector rights on every catalog.
    admin_token: str = ""
    # Run migrations at start-up (the `migrate` command does the same on demand).
    migrate_on_start: bool = True

    # Limits: a query past these gets a 4xx, never a slow scan.
    max_b_size: int = 5000
    max_unbatched: int = 100000
    max_list_length: int = 1000
    max_text_length: int = 1000
    # Entries of one batch request (a staging or an append, converted in memory at once), and of
    # a staged batch in all, the union of its appends (rows in PostgreSQL): a rebuild of a large
    # site streams its entries in appends of a few thousand (docs/decisions/0018).
    max_batch_entries: int = 100000
    max_staged_entries: int = Field(default=10_000_000, ge=1)
    # A clear batch of at least this many entries (a rebuild) commits with the catalog's secondary
    # indexes dropped, and builds them again inside its commit (0 never): queries of the catalog
    # wait for that commit meanwhile (docs/decisions/0018). Its statements may run this many
    # seconds (a batch of at least that size, clear or not; 0: no limit), not statement_timeout.
    bulk_commit_entries: int = Field(default=20_000, ge=0)
    bulk_statement_timeout: float = Field(default=3600.0, ge=0)
    # The service analyzes a catalog's partition itself once its commits changed 50 rows plus 10%
    # of it since the last time, at most once per this many seconds per catalog (0: never, leave
    # it to autovacuum): a catalog filled before autovacuum's next round was planned without
    # statistics (store/upkeep.py).
    analyze_pause: float = Field(default=30.0, ge=0)
    # Request bodies larger than these are refused with 413 before they are parsed: searches
    # and other calls, and index batches (one batch carries a whole ZODB transaction).
    max_body_size: int = Field(default=1 << 20, ge=1024)
    max_batch_body_size: int = Field(default=256 << 20, ge=1024)
    max_query_terms: int = 64
    # Cost bounds of a public search (anonymous, or with a frontend's signed token; not the
    # connector's or the admin's): words of a text query, words with '*' or '?' in it (Plone's
    # search form sends one, after the last word), lexicon words one of them may match, and
    # seconds the search may take (0: no limit but statement_timeout). Past them: 422. Measured
    # with benchmarks/public_cost.py; docs/api.md, "Cost bounds of public searches".
    public_max_text_terms: int = Field(default=32, ge=1)
    public_max_globs: int = Field(default=1, ge=0)
    public_max_glob_words: int = Field(default=1000, ge=1)
    public_search_timeout: float = Field(default=5.0, ge=0)
    # A SearchableText query in relevance order reads only the documents of its words' best score
    # cells (docs/decisions/0007) for pages ending at most this many results in (0: never) ...
    relevance_top: int = Field(default=1000, ge=0)
    # ... from cells holding at least this many documents, plus four per result asked for.
    relevance_candidates: int = Field(default=100, ge=1)
    # ... with a generic plan, made once per connection: planning it for its parameters took
    # longer than running it on small catalogs (docs/decisions/0012). False plans every run.
    relevance_generic_plan: bool = True
    # Staged batches not committed or aborted in this many seconds are resolved (or dropped).
    staged_batch_ttl: float = 900.0
    # ... except an unrecorded batch of a catalog whose client resolves its batches itself (the
    # Plone connector, on any storage): aborted only after this many seconds (docs/decisions/0011).
    staged_batch_abandon_ttl: float = 7 * 86400.0

    # Python's cyclic garbage collector in each worker (gc.set_threshold; Python's own default is
    # 700, 10, 10). An index batch holds its parsed entries (about 100 objects each, thousands of
    # entries) for the whole request, and with the default every few batches trigger a full
    # collection that walks all of them: a fifth of a worker's CPU during a bulk load. The data
    # has no reference cycles; reference counting frees it. Set "[700, 10, 10]" for Python's.
    gc_thresholds: tuple[NonNegativeInt, NonNegativeInt, NonNegativeInt] = (20000, 20, 10)

    # Browsers on these origins may call the public routes (/search, /{catalog}/@...): a JSON
    # list, e.g. CATALOG_CORS_ORIGINS='["https://www.example.org"]'; "*" allows every origin.
    # Empty (the default): no cross-origin calls. Preflights are cached this many seconds.
    cors_origins: list[str] = Field(default_factory=list)
    cors_max_age: int = Field(default=600, ge=0)
    # Cache-Control max-age of anonymous public GET searches (shared caches may keep them this
    # long); answers for callers with a credential are private and revalidated with their ETag.
    public_max_age: int = Field(default=10, ge=0)

    # The public routes (/search, /{catalog}/@search): a parameter naming no index, option or
    # metadata field is refused with 400 (False: dropped, as plone.restapi drops it); pages are
    # of 25 unless asked, and at most this many.
    public_strict: bool = True
    public_max_b_size: int = Field(default=1000, ge=1)

    # The demo search page at / (its assets under /demo-assets/, and POST /demo-page/token, which
    # mints five-minute Anonymous tokens): off unless asked; `serve --demo` (make run) turns it on.
    demo_page: bool = False

    # Log level of the service and uvicorn; one JSON object a line (false: plain text).
    log_level: str = "info"
    log_json: bool = True


@lru_cache
def get_settings() -> Settings:
    return Settings()
