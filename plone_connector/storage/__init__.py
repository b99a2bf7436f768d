"""A ZODB storage writing object state as JSONB rows in PostgreSQL (see docs/storage.md)."""

from plone_connector.storage.storage import JsonbStorage

__all__ = ["JsonbStorage"]
