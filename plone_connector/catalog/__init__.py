"""The portal_catalog replacement: a client of the catalog service (docs/connector.md).

Which module holds what (docs/architecture.md walks the paths):

- ``tool.py``: ``ServiceCatalogTool``, portal_catalog. It depends on the modules below and none
  of them imports it: they find it by ``interfaces.IServiceCatalogTool`` (``is_service_tool``) or
  are handed it. Only the install (``setuphandlers.py``) sits above it.
- A query: ``tool.searchResults`` -> ``_service_search``, which stages the transaction's own
  batch first; ``wire.wire_query`` turns ZCatalog's query into the service's (``query_value``,
  ``wire_query_value``, the batch arguments); ``client.search`` sends it; ``committed.py`` waits
  for a batch another process committed; ``cache.py`` keeps the answers.
- The answer: ``brains.py`` (``BrainRecord``, ``CatalogBrain``, ``LazyResults``).
- Indexing: ``extraction.py`` reads an object's index values as each ZCatalog index type does,
  ``wire.py`` makes them and the metadata JSON (``catalog_uid``: an entry's key), ``schema.py``
  declares the indexes to the service.
- The batch (commit) protocol: ``batch.py`` (one batch per ZODB transaction, a data manager),
  ``queue.py`` (CMFCore's indexing queue), ``outcomes.py`` (batches left staged by a crash),
  ``undo.py`` (ZODB undo).
- Index objects whose data reads go to the service: ``indexes.py``; positions in a folder:
  ``ordering.py``; new objects of a transaction: ``new_objects.py``.
- Around them: ``client.py`` (HTTP), ``errors.py``, ``settings.py``, ``site_settings.py``,
  ``stats.py``, ``progress.py``, ``verify.py`` (drift report), ``views.py``, ``token_view.py``,
  ``scripts.py``.

The import-linter contract "The catalog tool depends on its parts" in pyproject.toml keeps that
order.
"""

from . import queue

queue.apply()
