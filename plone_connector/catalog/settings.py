"""Where the catalog service is and how to reach it: environment variables, read when first needed."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ConnectorSettings:
    url: str
    token: str
    # The service's address as browsers reach it (``@@catalog-token``'s search_url); the URL above
    # unless set.
    public_url: str = ""
    # Seconds for one call, its retries included: a page waits at most this long for one query
    # before the error page is shown.
    timeout: float = 10.0
    connect_timeout: float = 2.0
    # Attempts for idempotent calls (queries, stage, commit, abort) on connection errors and
    # 502/503/504, within the timeout; 0: as many as the timeout allows (pauses grow to 1 s).
    retries: int = 0
    pool_size: int = 20
    # Rows of a lazy result's first page when the query has no b_size (what a listing reads of
    # it); reading on fetches pages four times the rows read so far.
    page_size: int = 20
    cache_size: int = 2000
    # Batches a crashed process left staged (outcomes.py): resolved once staged this many seconds,
    # looked for at most this often per process (0: never; the service then aborts them, after
    # CATALOG_STAGED_BATCH_ABANDON_TTL once a process declared that the connector resolves them).
    resolve_after: float = 900.0
    resolve_interval: float = 60.0
    # A transaction's batch is sent ahead in appends of this many entries once it holds that many
    # (a rebuild, an import), and the entries sent are dropped here (0: never; docs/decisions/0018).
    chunk_entries: int = 1000
    # Seconds for the commit of a batch sent ahead so (the service applies it whole, and builds
    # the catalog's indexes again after a large rebuild).
    bulk_timeout: float = 3600.0

    @classmethod
    def from_environ(cls, environ=None) -> ConnectorSettings:
        env = os.environ if environ is None else environ
        return cls(
            url=env.get("CATALOG_SERVICE_URL", "http://127.0.0.1:8080").rstrip("/"),
            token=env.get("CATALOG_SERVICE_TOKEN", ""),
            public_url=env.get("CATALOG_SERVICE_PUBLIC_URL", "").rstrip("/"),
            timeout=float(env.get("CATALOG_SERVICE_TIMEOUT", "10")),
            connect_timeout=float(env.get("CATALOG_SERVICE_CONNECT_TIMEOUT", "2")),
            retries=int(env.get("CATALOG_SERVICE_RETRIES", "0")),
            pool_size=int(env.get("CATALOG_SERVICE_POOL_SIZE", "20")),
            page_size=int(env.get("CATALOG_SERVICE_PAGE_SIZE", "20")),
            cache_size=int(env.get("CATALOG_SERVICE_CACHE_SIZE", "2000")),
            resolve_after=float(env.get("CATALOG_SERVICE_RESOLVE_AFTER", "900")),
            resolve_interval=float(env.get("CATALOG_SERVICE_RESOLVE_INTERVAL", "60")),
            chunk_entries=int(env.get("CATALOG_SERVICE_CHUNK_ENTRIES", "1000")),
            bulk_timeout=float(env.get("CATALOG_SERVICE_BULK_TIMEOUT", "3600")),
        )
