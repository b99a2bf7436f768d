-- The objects whose changes a batch commit is applying, while it applies them. A commit inserts
-- its batch's uids here first, in uid order, and deletes them again before it ends: the primary
-- key makes a second commit touching one of those objects wait until the first has committed or
-- aborted, so commits of one catalog that touch different objects run side by side
-- (docs/decisions/0009). Rows never outlive their transaction, so the table is unlogged.
create unlogged table catalog_inflight (
    catalog_id  integer not null,
    uid         text collate "C" not null,
    primary key (catalog_id, uid)
);

-- Statistics tables updated by every commit: room on each page for HOT updates.
alter table catalog_lexicon set (fillfactor = 70);
alter table catalog_text_cell set (fillfactor = 70);
alter table catalog_text_stats set (fillfactor = 50);
