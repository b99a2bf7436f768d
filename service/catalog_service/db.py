"""Where the service's PostgreSQL comes from: DATABASE_URL, or the embedded server."""

from __future__ import annotations

from .settings import Settings


def resolve_dsn(settings: Settings) -> str:
    if settings.database_url:
        return settings.database_url
    from .embedded import start

    return start(settings.embedded_pgdata)
