-- Typo tolerance of the public search routes (docs/decisions/0021) finds lexicon words within a
-- few edits with fuzzystrmatch's levenshtein_less_equal. A contrib extension, trusted since
-- PostgreSQL 13 (a database owner may create it); where it is not installed or may not be
-- created, the service generates the words one edit away instead, so this never fails.
do $$
begin
    if exists (select 1 from pg_available_extensions where name = 'fuzzystrmatch') then
        create extension if not exists fuzzystrmatch;
    end if;
exception when insufficient_privilege or feature_not_supported then
    raise notice 'fuzzystrmatch not created (%): typo corrections are one edit only', sqlerrm;
end
$$;
