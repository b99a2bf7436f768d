"""The connector's two-site Plone layer (tests/connector/sites.py), with its ZODB on JsonbStorage.

``ConnectorLayer`` stacks a DemoStorage on Plone's fixture database, as every plone.app.testing
layer does. This layer instead opens a ``DB`` on a ``JsonbStorage`` in PostgreSQL, seeds it with
the objects of the Plone fixture (the Zope application and the stock site ``plone``, copied record
by record through the storage's ``restore``), and then runs the connector layer's own set-up on it:
the site ``conn`` with the catalog connector is created and installed directly on the JSONB storage.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from unittest import mock

import transaction
import ZODB
import ZODB.blob
from plone.app.testing import PLONE_FIXTURE
from plone.testing import zodb
from ZODB.Connection import TransactionMetaData
from ZODB.serialize import referencesf
from ZODB.utils import z64

from plone_connector.storage import JsonbStorage
from tests.connector.sites import ConnectorLayer, set_up, tear_down


def open_db(dsn: str) -> ZODB.DB:
    return ZODB.DB(JsonbStorage(dsn, name="e2e"))


def layer_db(layer, key: str = "zodbDB"):
    """The resource ``key`` that ``layer`` itself pushed (not a sibling layer's on top of it)."""
    for owner in [layer, *layer.baseResolutionOrder]:
        for value, pushed_by in getattr(owner, "_resources", {}).get(key, ()):
            if pushed_by is layer:
                return value
    return None


def seed(storage: JsonbStorage, source) -> int:
    """Copy every object reachable from the root of ``source`` into ``storage``, in one transaction
    with the source's last tid; return how many were copied."""
    txn = TransactionMetaData(description="seeded from the Plone test fixture")
    tid = source.lastTransaction()
    storage.tpc_begin(txn, tid)
    try:
        seen, todo = {z64}, [z64]
        while todo:
            oid = todo.pop()
            data, serial = source.load(oid, "")
            # Every record gets the transaction's tid as its serial, as a commit gives it:
            # FileStorage would keep an older source serial inside this newer transaction.
            if ZODB.blob.is_blob_record(data):
                # restoreBlob takes ownership of the file it is given.
                fd, own_copy = tempfile.mkstemp(dir=storage.temporaryDirectory())
                os.close(fd)
                shutil.copyfile(source.loadBlob(oid, serial), own_copy)
                storage.restoreBlob(oid, tid, data, own_copy, None, txn)
            else:
                storage.restore(oid, tid, data, "", None, txn)
            for ref in referencesf(data):
                if ref not in seen:
                    seen.add(ref)
                    todo.append(ref)
        storage.tpc_vote(txn)
        storage.tpc_finish(txn)
    except BaseException:
        storage.tpc_abort(txn)
        raise
    return len(seen)


class JsonbConnectorLayer(ConnectorLayer):
    """Set ``dsn`` (and ``catalog_id``, the service catalog of the site ``conn``) before set-up."""

    dsn: str | None = None
    catalog_id = "jsonb-conn"
    seeded = 0

    def _jsonb_db(self, base_db, name=None) -> ZODB.DB:
        # Whatever is on top of the resource stack (a sibling layer still set up in this
        # session) is not our base: seed from the Plone fixture's own database.
        source = layer_db(PLONE_FIXTURE)
        storage = JsonbStorage(self.dsn, name="e2e-seed")
        try:
            storage.cleanup()
            self.seeded = seed(storage, source.storage)
        finally:
            storage.close()
        return open_db(self.dsn)

    def setUp(self):
        if not self.dsn:
            raise RuntimeError("JsonbConnectorLayer.dsn is not set")
        with mock.patch.object(zodb, "stackDemoStorage", self._jsonb_db), \
                mock.patch.dict(os.environ, {"CATALOG_SERVICE_CATALOG_ID": self.catalog_id}):
            super().setUp()

    def restart(self) -> ZODB.DB:
        """Close the database and open a new one on the same PostgreSQL tables."""
        transaction.abort()
        self["zodbDB"].close()
        del self["zodbDB"]
        self["zodbDB"] = db = open_db(self.dsn)
        return db


JSONB_LAYER = JsonbConnectorLayer(name="JsonbConnectorLayer")


def is_set_up(layer) -> bool:
    return layer_db(layer) is not None


@contextlib.contextmanager
def layer_set_up(layer):
    """Set up ``layer``; its bases only if no other fixture of this session already did."""
    if is_set_up(PLONE_FIXTURE):
        layer.setUp()
        layers = [layer]
    else:
        layers = set_up(layer)
    try:
        yield layer
    finally:
        tear_down(layers)
