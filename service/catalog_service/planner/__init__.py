"""ZCatalog query -> SQL. Pure functions: no I/O, so they are tested exhaustively without a database."""
