-- The catalog service's tables. Each catalog (one Plone site) gets its own partition of
-- catalog_object, named catalog_object_<number>, created by the service when the catalog is
-- created; the expression indexes for that catalog's declared indexes live on that partition only.

create table catalog (
    id          serial primary key,
    name        text not null unique,
    title       text not null default '',
    token_hash  text not null,
    indexes     jsonb not null default '[]',
    metadata    jsonb not null default '[]',
    -- Bumped inside the database transaction that commits a batch, never through a sequence,
    -- so nobody sees a new counter before the data it stands for.
    counter     bigint not null default 0,
    -- Bumped with every change of indexes or metadata, so service replicas reload their copy.
    schema_rev  integer not null default 0,
    created     timestamptz not null default now()
);

create sequence catalog_rid_seq;

create table catalog_object (
    catalog_id  integer not null,
    rid         bigint not null,
    uid         text collate "C" not null,
    path        text collate "C" not null,
    parent      text collate "C" not null,
    depth       integer not null,
    allowed     text[] not null default '{}',
    idx         jsonb not null default '{}',
    -- Word sequences of the ZCTextIndexes, apart from idx: they are large (TOASTed), and the
    -- small idx document is read by nearly every query.
    text        jsonb not null default '{}',
    meta        jsonb not null default '{}',
    version     bigint not null default 0,
    primary key (catalog_id, uid)
) partition by list (catalog_id);

-- Objects removed by an unindex, remembered with the version of the removal so that a delayed,
-- older index write cannot bring them back.
create table catalog_tombstone (
    catalog_id  integer not null,
    uid         text not null,
    version     bigint not null,
    removed     timestamptz not null default now(),
    primary key (catalog_id, uid)
);

-- Batches by id: makes sending the same batch twice apply it once, and holds staged batches.
create table catalog_batch (
    catalog_id  integer not null references catalog (id) on delete cascade,
    batch_id    text not null,
    state       text not null check (state in ('staged', 'committed', 'aborted')),
    clear       boolean not null default false,
    entries     integer not null default 0,
    applied     integer not null default 0,
    skipped     integer not null default 0,
    -- The text statistics the staged rows bring (see store/batches.py, _staged_profile).
    profile     jsonb,
    created     timestamptz not null default now(),
    finished    timestamptz,
    primary key (catalog_id, batch_id)
);
create index catalog_batch_staged on catalog_batch (created) where state = 'staged';

-- The rows of staged batches, already converted; a query naming the batch overlays them.
create table catalog_staged (
    catalog_id  integer not null,
    batch_id    text not null,
    seq         integer not null,
    op          text not null check (op in ('index', 'unindex')),
    uid         text collate "C" not null,
    rid         bigint,
    path        text collate "C",
    parent      text collate "C",
    depth       integer,
    allowed     text[],
    idx         jsonb,
    text        jsonb,
    meta        jsonb,
    -- Partial reindex: the index names updated, and the new values/metadata alone; applied onto
    -- the row as it is at commit time. idx/meta above hold the merged row for overlay queries.
    idxs        text[],
    delta_idx   jsonb,
    delta_text  jsonb,
    delta_meta  jsonb,
    version     bigint not null default 0,
    primary key (catalog_id, batch_id, seq),
    foreign key (catalog_id, batch_id) references catalog_batch (catalog_id, batch_id) on delete cascade
);
create index catalog_staged_uid on catalog_staged (catalog_id, uid);

-- ZCTextIndex lexicons: every word ever indexed (for glob queries), with the number of
-- documents that hold it now (for Okapi BM25 relevance), kept up to date by each commit.
create table catalog_lexicon (
    catalog_id  integer not null,
    index_name  text not null,
    word        text collate "C" not null,
    df          bigint not null default 0,
    primary key (catalog_id, index_name, word)
);

-- Per text index: documents in the index and their total length in words (Okapi's N and mean).
create table catalog_text_stats (
    catalog_id  integer not null,
    index_name  text not null,
    docs        bigint not null default 0,
    words       bigint not null default 0,
    primary key (catalog_id, index_name)
);

-- ZCTextIndex's Okapi BM25 score of one word in one document (OkapiIndex, k1 = 1.2, b = 0.75),
-- in the same IEEE double arithmetic and order, scaled to an integer.
create function catalog_okapi(f integer, len integer, n bigint, df bigint, mean double precision)
returns integer language sql immutable parallel safe as $$
    select coalesce(floor((f::float8 * 2.2 / (f + 1.2 * (0.25 + 0.75 * len::float8 / mean)))
                          * (ln(1.0 + n::float8 / nullif(df, 0)) * 1024.0) + 0.5)::integer, 0)
$$;

-- How often `word` occurs in the word sequence `words` (jsonb `-` drops every equal string), in
-- one expression of immutable operators so that the planner inlines it.
create function catalog_word_count(words jsonb, word text) returns integer
language sql immutable parallel safe as $$
    select jsonb_array_length(words) - jsonb_array_length(words - word)
$$;

-- Filled by a ZODB storage in the same database transaction as its commit: the batch ids of
-- the ZODB transaction. The service reads it to resolve batches left staged by a crash.
create table if not exists catalog_txn_outcome (
    batch_id    text primary key,
    tid         bigint,
    recorded    timestamptz not null default now()
);

-- jsonb array of numbers -> bigint[] in element order (sort key of multi-valued date indexes).
create function catalog_int_array(j jsonb) returns bigint[]
language sql immutable parallel safe as $$
    select case when jsonb_typeof(j) = 'array'
        then array(select (e #>> '{}')::bigint from jsonb_array_elements(j) with ordinality as t(e, n) order by n)
    end
$$;

-- Does the word sequence `words` (jsonb array of strings) contain `phrase` as consecutive words?
create function catalog_phrase_match(words jsonb, phrase text[]) returns boolean
language sql immutable parallel safe as $$
    select exists (
        select 1
        from jsonb_array_elements_text(words) with ordinality as w(word, n)
        where w.word = phrase[1]
          and (select bool_and(coalesce(words ->> (w.n::int - 1 + k - 1) = phrase[k], false))
               from generate_series(1, cardinality(phrase)) as k)
    )
$$;

-- Parent and depth of a normalised path ('/a/b' -> '/a', 2), for path indexes over attributes.
create function catalog_path_parent(p text) returns text
language sql immutable parallel safe as $$
    select case when p is null then null
                when strpos(p, '/') = 0 then null
                else coalesce(nullif(left(p, length(p) - strpos(reverse(p), '/')), ''), '/') end
$$;

create function catalog_path_depth(p text) returns integer
language sql immutable parallel safe as $$
    select cardinality(array_remove(string_to_array(p, '/'), ''))
$$;

-- The principals allowed to view an object, from its allowedRolesAndUsers index value.
create function catalog_allowed(idx jsonb) returns text[]
language sql immutable parallel safe as $$
    select case when jsonb_typeof(idx->'allowedRolesAndUsers') = 'array'
        then array(select jsonb_array_elements_text(idx->'allowedRolesAndUsers'))
        else '{}'::text[] end
$$;

-- jsonb arrays as sortable SQL arrays (KeywordIndex sort keys), element order kept.
create function catalog_text_array(j jsonb) returns text[]
language sql immutable parallel safe as $$
    select case when jsonb_typeof(j) = 'array'
        then array(select e #>> '{}' from jsonb_array_elements(j) with ordinality as t(e, n) order by n)
    end
$$;

create function catalog_numeric_array(j jsonb) returns numeric[]
language sql immutable parallel safe as $$
    select case when jsonb_typeof(j) = 'array'
        then array(select (e #>> '{}')::numeric from jsonb_array_elements(j) with ordinality as t(e, n) order by n)
    end
$$;
