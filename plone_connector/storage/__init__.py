"""A ZODB storage writing object state as JSONB rows in PostgreSQL (see docs/storage.md)."""

from plone_connector.storage import transcoder as _transcoder

if _transcoder.pure_requested():
    # Before anything imports the transcoder: every import then gets the pure reference.
    _transcoder.load_pure(install=True)

from plone_connector.storage.storage import JsonbStorage, StorageOpenError  # noqa: E402

__all__ = ["JsonbStorage", "StorageOpenError"]
