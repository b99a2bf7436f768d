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
