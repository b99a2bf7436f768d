-- The version of a batch's transaction snapshot (Batch.version). A clear batch with a version
-- removes only the objects and tombstones of older versions when it commits, so that a clear
-- committed late (by a resolver, after other transactions committed newer changes) keeps those
-- changes. Null: the batch gave none, and its clear removes everything as before.
alter table catalog_batch add column version bigint;
