"""The models of scoped API keys (``/catalogs/{id}/keys``; docs/api.md, "Scoped API keys").

A key is a credential for a server or a static site: bound to one catalog, it searches as the
principals it was given (Anonymous unless the admin names others) and only among the objects its
``filter`` selects, whatever the request asks.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import AwareDatetime, Field

from .api import Model, Text


class KeyCreate(Model):
    """A new key (admin). ``filter`` is a ZCatalog query of index conditions only (no ``sort_on``,
    ``b_size``, text or security indexes), checked against the catalog's indexes; ``expires`` or
    ``ttl`` (seconds) end it, neither: it lasts until revoked."""

    name: Text = Field(min_length=1, max_length=200)
    filter: dict[str, Any] = Field(default_factory=dict, max_length=16)
    principals: list[Text] = Field(default_factory=lambda: ["Anonymous"], min_length=1, max_length=1000)
    expires: AwareDatetime | None = None
    ttl: int | None = Field(default=None, ge=1, le=10 * 366 * 86400)


class KeyInfo(Model):
    """A key as listed: never its secret."""

    id: str
    catalog: str
    name: str
    filter: dict[str, Any]
    principals: list[str]
    created: datetime
    expires: datetime | None
    revoked: datetime | None
    # Neither revoked nor expired.
    active: bool


class KeyCreated(KeyInfo):
    """The answer of ``POST /catalogs/{id}/keys``: the key itself, shown this once."""

    key: str


class KeyList(Model):
    keys: list[KeyInfo]
