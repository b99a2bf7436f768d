-- Relevance order without scoring every match (docs/decisions/0007-text-relevance.md).
--
-- A word's Okapi score in a document depends only on how often the word occurs there (f) and on
-- the document's length (len), besides per-word constants. Both are put in buckets of about 20%
-- width; one (word, f bucket, length bucket) is a "cell". Each row keeps the cells of its
-- SearchableText words next to them (text->'SearchableText#cells', written by the service), a GIN
-- index on them (built per catalog by the service) and a count of the documents in each cell let
-- a single-word query read only the documents of the cells that can hold its best results.

-- Bucket b holds the integers from catalog_text_bucket_lo(b) to catalog_text_bucket_hi(b): exact
-- up to 8, then each bound 1.2 times the one before (the Python side, catalog_service.text.cells,
-- builds the same list and a test compares them).
create function catalog_text_bucket(x integer) returns integer
language sql immutable parallel safe as $$
    select width_bucket(x, '{1,2,3,4,5,6,7,8,10,12,15,18,22,27,33,40,48,58,70,84,101,122,147,177,213,256,308,370,444,533,640,768,922,1107,1329,1595,1914,2297,2757,3309,3971,4766,5720,6864,8237,9885,11862,14235,17082,20499,24599,29519,35423,42508,51010,61212,73455,88146,105776,126932,152319,182783,219340,263208,315850,379020,454824,545789,654947,785937,943125,1131750,1358100,1629720,1955664,2346797,2816157,3379389,4055267,4866321,5839586,7007504,8409005,10090806,12108968,14530762}'::integer[])
$$;

create function catalog_text_bucket_lo(b integer) returns integer
language sql immutable parallel safe as $$
    select ('{1,2,3,4,5,6,7,8,10,12,15,18,22,27,33,40,48,58,70,84,101,122,147,177,213,256,308,370,444,533,640,768,922,1107,1329,1595,1914,2297,2757,3309,3971,4766,5720,6864,8237,9885,11862,14235,17082,20499,24599,29519,35423,42508,51010,61212,73455,88146,105776,126932,152319,182783,219340,263208,315850,379020,454824,545789,654947,785937,943125,1131750,1358100,1629720,1955664,2346797,2816157,3379389,4055267,4866321,5839586,7007504,8409005,10090806,12108968,14530762}'::integer[])[b]
$$;

-- The last bucket is open: its upper end is the largest integer.
create function catalog_text_bucket_hi(b integer) returns integer
language sql immutable parallel safe as $$
    select coalesce(catalog_text_bucket_lo(b + 1) - 1, 2147483647)
$$;

-- The cells of a word sequence (jsonb array of words), one per distinct word, as
-- 'f bucket:length bucket:word' (the word last: it may hold any character but whitespace). The
-- service computes the same in Python when it stores a row; this is for the rows stored before.
-- It calls no other catalog_ function (PostgreSQL 17 on runs maintenance with a restricted
-- search_path), so it repeats the bucket bounds.
create function catalog_text_cells(words jsonb) returns text[]
language sql immutable parallel safe as $$
    select case when jsonb_typeof(words) = 'array' then array(
        select width_bucket(count(*)::integer, k.b) || ':' || width_bucket(jsonb_array_length(words), k.b) || ':' || w
        from jsonb_array_elements_text(words) w, (select '{1,2,3,4,5,6,7,8,10,12,15,18,22,27,33,40,48,58,70,84,101,122,147,177,213,256,308,370,444,533,640,768,922,1107,1329,1595,1914,2297,2757,3309,3971,4766,5720,6864,8237,9885,11862,14235,17082,20499,24599,29519,35423,42508,51010,61212,73455,88146,105776,126932,152319,182783,219340,263208,315850,379020,454824,545789,654947,785937,943125,1131750,1358100,1629720,1955664,2346797,2816157,3379389,4055267,4866321,5839586,7007504,8409005,10090806,12108968,14530762}'::integer[] as b) k group by w, k.b)
    end
$$;

-- Documents per cell, per text index, kept up to date by every commit as catalog_lexicon is.
-- Rows are never removed but by a clear: a cell that empties keeps n = 0.
create table catalog_text_cell (
    catalog_id  integer not null,
    index_name  text not null,
    word        text collate "C" not null,
    fb          smallint not null,
    lb          smallint not null,
    n           bigint not null default 0,
    primary key (catalog_id, index_name, word, fb, lb)
);

-- Catalogs made before this migration: store the cells of the rows they hold, and count them.
update catalog_object
set text = text || jsonb_build_object('SearchableText#cells', to_jsonb(catalog_text_cells(text->'SearchableText')))
where jsonb_typeof(text->'SearchableText') = 'array';

insert into catalog_text_cell (catalog_id, index_name, word, fb, lb, n)
select o.catalog_id, 'SearchableText', c.word, catalog_text_bucket(c.f),
       catalog_text_bucket(jsonb_array_length(o.text->'SearchableText')), count(*)
from catalog_object o
cross join lateral (select w, count(*)::integer from jsonb_array_elements_text(o.text->'SearchableText') w
                    group by w) c(word, f)
where jsonb_typeof(o.text->'SearchableText') = 'array'
group by 1, 2, 3, 4, 5;
