"""Contracts shared by the catalog service and its clients: HTTP API models, SQL migrations, formats."""
