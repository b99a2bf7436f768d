"""One error tree for the service; ``api.problems`` maps it to RFC 9457 problem details."""

from __future__ import annotations


class CatalogError(Exception):
    status = 500
    title = "Catalog error"
    # HTTP headers of the answer (api.problems).
    headers: dict[str, str] = {}

    def __init__(self, detail: str = "", **extra):
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class QueryError(CatalogError):
    """The query cannot be answered as given (ZCatalog would raise, or a limit is exceeded)."""

    status = 400
    title = "Invalid query"


class BadRequest(CatalogError):
    status = 400
    title = "Bad request"


class LimitExceeded(QueryError):
    status = 422
    title = "Limit exceeded"


class Unauthorized(CatalogError):
    """No credential where one is needed, a malformed one, or one the service does not know."""

    status = 401
    title = "Unauthorized"
    headers = {"WWW-Authenticate": 'Bearer realm="catalog-service"'}


class Forbidden(CatalogError):
    """A valid credential without the right."""

    status = 403
    title = "Forbidden"


class NotFound(CatalogError):
    status = 404
    title = "Not found"


class Conflict(CatalogError):
    status = 409
    title = "Conflict"


class Unavailable(CatalogError):
    status = 503
    title = "Service unavailable"
    # Seconds a client should wait before it tries again (the Retry-After header).
    retry_after = 1
    headers = {"Retry-After": str(retry_after)}


class DatabaseUnavailable(Unavailable):
    """PostgreSQL cannot be reached, or it closed the connection (a restart, a failover, a
    terminated backend): a passing condition, answered 503 so that clients try again."""

    title = "Database unavailable"


class CatalogBusy(Unavailable):
    """A statement ran past the service's statement timeout, mostly waiting for a lock (a large
    rebuild's commit holds the catalog's partition, docs/decisions/0018): answered 503 so that
    clients try again, never 500."""

    title = "Catalog busy"
