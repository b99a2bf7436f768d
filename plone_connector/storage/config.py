"""ZConfig factory of the ``<jsonbstorage>`` section (component.xml)."""

from __future__ import annotations

from ZODB.config import BaseConfig

from plone_connector.storage.storage import JsonbStorage


class JsonbStorageFactory(BaseConfig):
    def open(self, database_name="unnamed", databases=None):
        config = self.config
        return JsonbStorage(
            config.dsn,
            name=config.name,
            history_preserving=config.history_preserving,
            blob_dir=config.blob_dir,
            read_only=config.read_only,
            listen=config.listen,
            connect_timeout=config.connect_timeout,
            cache_mb=config.cache_size_mb,
            pack_gc=config.pack_gc,
            commit_lock_timeout=config.commit_lock_timeout,
            blob_cache_size=config.blob_cache_size,
            blob_cache_size_check=config.blob_cache_size_check,
        )
