"""The portal_catalog replacement: a client of the catalog service (docs/connector.md)."""

from . import queue

queue.apply()
