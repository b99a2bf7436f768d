"""What the connector costs a page: service requests, query cache and transaction memo hits per
page render.

Counted per thread (a Zope worker renders one request at a time), summed per process when the
publisher ends a request; a log line reports the totals now and then.
"""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger("plone_connector.catalog")

# A summary line at most this often (seconds), and only after renders that used the catalog.
LOG_INTERVAL = 60.0

_local = threading.local()
_lock = threading.Lock()


class Totals:
    def __init__(self):
        self.renders = 0
        self.renders_with_queries = 0
        self.service_requests = 0
        self.cache_hits = 0
        self.cache_misses = 0
        self.memo_hits = 0
        self.memo_misses = 0
        self.last_log = time.monotonic()

    def as_dict(self) -> dict:
        lookups = self.cache_hits + self.cache_misses
        memo_lookups = self.memo_hits + self.memo_misses
        return {
            "renders": self.renders,
            "service_requests": self.service_requests,
            "service_requests_per_render": self.service_requests / self.renders if self.renders else 0.0,
            "cache_hits": self.cache_hits,
            "cache_misses": self.cache_misses,
            "cache_hit_rate": self.cache_hits / lookups if lookups else 0.0,
            "memo_hits": self.memo_hits,
            "memo_misses": self.memo_misses,
            "memo_hit_rate": self.memo_hits / memo_lookups if memo_lookups else 0.0,
        }


totals = Totals()


def _counts() -> dict | None:
    return getattr(_local, "counts", None)


def request_sent() -> None:
    counts = _counts()
    if counts is not None:
        counts["requests"] += 1


def cache_lookup(hit: bool) -> None:
    counts = _counts()
    if counts is not None:
        counts["hits" if hit else "misses"] += 1


def memo_lookup(hit: bool) -> None:
    """A lookup in the transaction memo (cache.TransactionMemo)."""
    counts = _counts()
    if counts is not None:
        counts["memo_hits" if hit else "memo_misses"] += 1


def render_started(event=None) -> None:
    _local.counts = {"requests": 0, "hits": 0, "misses": 0, "memo_hits": 0, "memo_misses": 0}


def render_ended(event=None) -> dict | None:
    """Add this thread's render to the totals; returns its counts."""
    counts = _counts()
    _local.counts = None
    if counts is None:
        return None
    with _lock:
        totals.renders += 1
        totals.service_requests += counts["requests"]
        totals.cache_hits += counts["hits"]
        totals.cache_misses += counts["misses"]
        totals.memo_hits += counts["memo_hits"]
        totals.memo_misses += counts["memo_misses"]
        used = any(counts.values())
        if used:
            totals.renders_with_queries += 1
        due = used and time.monotonic() - totals.last_log >= LOG_INTERVAL
        if due:
            totals.last_log = time.monotonic()
            summary = totals.as_dict()
    if logger.isEnabledFor(logging.DEBUG) and event is not None:
        url = event.request.get("ACTUAL_URL", "") if getattr(event, "request", None) is not None else ""
        logger.debug("catalog service: %d requests, %d cache hits, %d misses, %d memo hits for %s",
                     counts["requests"], counts["hits"], counts["misses"], counts["memo_hits"], url)
    if due:
        logger.info(
            "catalog service: query cache hit rate %.1f%% (%d hits, %d misses), transaction memo hit "
            "rate %.1f%% (%d hits), %.2f service requests per page render over %d renders",
            100 * summary["cache_hit_rate"], summary["cache_hits"], summary["cache_misses"],
            100 * summary["memo_hit_rate"], summary["memo_hits"],
            summary["service_requests_per_render"], summary["renders"],
        )
    return counts


def reset() -> None:
    global totals
    with _lock:
        totals = Totals()
