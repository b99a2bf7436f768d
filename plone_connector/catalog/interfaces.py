"""The interface the parts find the service tool by, so that none of them imports tool.py."""

from __future__ import annotations

from Acquisition import aq_base
from zope.interface import Interface


class IServiceCatalogTool(Interface):
    """portal_catalog as a client of the catalog service (tool.ServiceCatalogTool)."""


def is_service_tool(obj) -> bool:
    """Whether ``obj`` (possibly acquisition-wrapped) is a service tool. Asked of its class, as an
    isinstance check would: a ghost is not loaded to answer it."""
    return IServiceCatalogTool.implementedBy(type(aq_base(obj)))
