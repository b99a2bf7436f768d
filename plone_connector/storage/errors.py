"""The storage's errors: each a ZODB ``StorageError``; the transient ones are retried by
transaction managers.
"""

from __future__ import annotations

import ZODB.POSException
from transaction.interfaces import TransientError


class StorageClosedError(ZODB.POSException.StorageError):
    """The storage (or this instance of it) was closed."""


class DisconnectedError(ZODB.POSException.StorageError, TransientError):
    """The database connection broke during a transaction; nothing of it was committed.

    Transient: transaction managers (and Zope's publisher) retry the transaction, which
    reconnects.
    """


class CommitLockTimeout(ZODB.POSException.StorageError, TransientError):
    """The commit lock, or the row lock of an object this transaction writes, was not granted
    within ``commit_lock_timeout`` seconds (another commit, or a history-preserving pack, held it).
    Nothing was committed; transient, so transaction managers retry."""


class StorageOpenError(ZODB.POSException.StorageError):
    """The storage could not be opened: the DSN is malformed, or the PostgreSQL server cannot be
    reached or refused the connection (the message says which; the driver's error is chained)."""

