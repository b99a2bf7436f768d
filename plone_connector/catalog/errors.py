"""The connector's errors: one small tree, so callers and the error view can tell them apart."""

from __future__ import annotations


class CatalogServiceError(Exception):
    """The catalog service could not do what was asked."""

    status: int | None = None

    def __init__(self, message: str, status: int | None = None, detail: str | None = None):
        super().__init__(message)
        self.status = status
        self.detail = detail


class ServiceUnavailable(CatalogServiceError):
    """The service did not answer (down, timeout, 5xx after retries)."""


class ServiceTimeout(ServiceUnavailable):
    """The service did not answer within the configured timeout (retries included)."""


class ServiceRejected(CatalogServiceError):
    """The service answered with a 4xx: the request itself is wrong (bad query, unknown index)."""


class CatalogNotFound(ServiceRejected):
    """The site's catalog does not exist in the service."""


class StreamedBatchRollback(Exception):
    """A savepoint rollback asked to take back catalog entries that a large transaction (a rebuild)
    had already sent ahead to the service in chunks (docs/decisions/0018): an append cannot take
    an entry back, so the rollback fails, and with it the transaction (it cannot commit)."""


class UnmergedResultsUnsupported(NotImplementedError):
    """``search(..., merge=0)`` or ``searchResults(_merge=False)`` of a sorted or relevance-ranked
    query: ZCatalog then answers its raw result records, (sort key or score, rid,
    ``_catalog.__getitem__``) tuples, for ``Products.ZCatalog.Catalog.mergeResults`` to merge the
    results of several catalogs (other unmerged queries get brains, from ZCatalog and the
    connector alike). No installed Plone package asks for records, and the service keeps none of
    ZCatalog's sort keys; ask for brains (the default) instead."""
