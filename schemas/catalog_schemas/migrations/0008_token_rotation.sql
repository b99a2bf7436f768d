-- A catalog's connector token can be rotated (POST /catalogs/{id}/token, `catalog-service catalog
-- rotate-token`): the token it replaces stays valid, as do the signed tokens minted with it, until
-- previous_token_until.
alter table catalog add column previous_token_hash text, add column previous_token_until timestamptz;
