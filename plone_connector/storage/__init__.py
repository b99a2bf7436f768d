"""A ZODB storage writing object state as JSONB rows in PostgreSQL (see docs/storage.md).

Where things are:

- ``storage.py``: ``JsonbStorage``, opening and configuration, the entry points of pack and
  cleanup; it composes the parts below, one class of methods per concern, which share the
  instance's state and do not import each other or ``storage.py`` (import-linter holds this).
- ``connections.py``: the instance's two PostgreSQL connections (load and store), replaced when
  they break.
- ``mvcc.py``: the read snapshot and ``poll_invalidations``.
- ``load.py``: the load path (``load``, ``prefetch``, ``loadBefore``, ``loadSerial``).
- ``store.py``: a transaction's rows before the vote (``new_oid``, ``store``, ``restore``,
  ``deleteObject``), streamed by COPY into the temporary table.
- ``commit.py``: the two-phase commit (``tpc_begin``, ``tpc_vote`` with conflict resolution,
  ``tpc_finish``, ``tpc_abort``).
- ``history.py``: ``history``, undo, ``iterator``, ``copyTransactionsFrom``.
- ``blobs.py``: storing, caching and loading blobs; ``blobcache.py`` limits the blob directory.
- ``pack.py``: pack and garbage collection.
- Below them: ``sql.py`` (every statement), ``schema.py`` (the tables and their migrations),
  ``rows.py`` (a written row and its COPY text), ``shared.py`` (what all instances share, the
  logger), ``errors.py``, ``cache.py`` (the process's record cache), ``listener.py``
  (LISTEN/NOTIFY), ``jsonstate*.py`` and ``transcoder.py`` (pickle to JSON and back),
  ``config.py`` (ZConfig).
"""

from plone_connector.storage import transcoder as _transcoder

if _transcoder.pure_requested():
    # Before anything imports the transcoder: every import then gets the pure reference.
    _transcoder.load_pure(install=True)

from plone_connector.storage.storage import JsonbStorage, StorageOpenError  # noqa: E402

__all__ = ["JsonbStorage", "StorageOpenError"]
