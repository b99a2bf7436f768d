"""PostgreSQL access: pool, migrations, catalogs, batches, searches."""
