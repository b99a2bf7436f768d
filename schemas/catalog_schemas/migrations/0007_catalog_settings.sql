-- How the public routes show a catalog's objects (CatalogSettings: public site URL, site path,
-- type titles). Read with the rest of the catalog row; changing them bumps schema_rev, so every
-- service process reloads its copy.
alter table catalog add column settings jsonb not null default '{}';
