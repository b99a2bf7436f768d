-- Scoped API keys (docs/decisions/0020): credentials for servers and static sites, each bound to
-- one catalog, with a filter that every search made with the key applies, and the principals it
-- searches as. Only the SHA-256 of a key is kept; `key_id` is its public part (shown by `list`,
-- named by `revoke`). A revoked key stays listed, with the time it was revoked.
create table catalog_key (
    catalog_id  integer not null references catalog (id) on delete cascade,
    key_id      text not null primary key,
    key_hash    text not null unique,
    name        text not null,
    filter      jsonb not null default '{}',
    principals  text[] not null default '{Anonymous}',
    created     timestamptz not null default now(),
    expires     timestamptz,
    revoked     timestamptz
);
create index catalog_key_catalog on catalog_key (catalog_id);
