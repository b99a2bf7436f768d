-- Staged rows are copied into a catalog's partition as they are, compressed datums included, so
-- they must not be compressed on the way: keep rows up to a page uncompressed and inline, as
-- the partitions do (store/catalogs.py TOAST_TARGET_OPTION explains why).
alter table catalog_staged set (toast_tuple_target = 8160);
