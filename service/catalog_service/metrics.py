"""Prometheus metrics of the service."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()

REQUESTS = Counter("catalog_http_requests_total", "HTTP requests", ["route", "method", "status"],
                   registry=REGISTRY)
LATENCY = Histogram("catalog_http_request_seconds", "HTTP request latency", ["route"], registry=REGISTRY,
                    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10))
QUERIES = Counter("catalog_queries_total", "Catalog searches", ["catalog"], registry=REGISTRY)
COUNT_CACHE = Counter("catalog_count_cache_total", "Search totals served from the count cache (hit) "
                      "or counted (miss)", ["result"], registry=REGISTRY)
FACET_CACHE = Counter("catalog_facet_cache_total", "Facet counts served from the facet cache (hit) "
                      "or counted (miss)", ["result"], registry=REGISTRY)
PAGE_CACHE = Counter("catalog_page_cache_total", "Search answers served from the page cache (hit) "
                     "or read and kept (miss)", ["result"], registry=REGISTRY)
BATCH_ENTRIES = Counter("catalog_batch_entries_total", "Index batch entries received", ["catalog", "stage"],
                        registry=REGISTRY)
BATCHES = Counter("catalog_batches_total", "Batches by outcome", ["catalog", "outcome"], registry=REGISTRY)
RESOLVED = Counter("catalog_batches_resolved_total", "Expired staged batches resolved", ["outcome"],
                   registry=REGISTRY)
POOL_SIZE = Gauge("catalog_db_pool_connections", "Connections in the primary pool", registry=REGISTRY)
