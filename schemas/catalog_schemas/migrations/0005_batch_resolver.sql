-- Catalogs whose client resolves the batches its crashed processes left staged (the Plone
-- connector reads the outcome from ZODB itself, whatever the storage: docs/decisions/0011). For
-- these the service's own resolver commits a staged batch that catalog_txn_outcome records, but
-- aborts an unrecorded one only after CATALOG_STAGED_BATCH_ABANDON_TTL, not after
-- CATALOG_STAGED_BATCH_TTL: the client decides first.
create table catalog_batch_resolver (
    catalog_id  integer primary key references catalog (id) on delete cascade,
    declared    timestamptz not null default now()
);
