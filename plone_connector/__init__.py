"""Plone side of the catalog service: the portal_catalog replacement and the JSONB ZODB storage."""
