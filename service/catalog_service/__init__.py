"""The catalog service: Plone's portal_catalog as JSONB tables in PostgreSQL, queried in ZCatalog's language."""
