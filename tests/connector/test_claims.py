"""Uid claims (tool._claim): transactions at once that change one uid's entry conflict in ZODB and
are retried (tests/connector/test_concurrent_commits.py shows what was lost without them); claims of
different uids merge (BTrees conflict resolution), so they add no conflict of their own."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from ZODB.POSException import ConflictError

from tests.connector.sites import CONNECTED, on_site
from tests.connector.test_concurrent_commits import _concurrently

pytestmark = [pytest.mark.slow, pytest.mark.plone]


def _claiming(uid: str, token: int):
    manager = SimpleNamespace(batch=SimpleNamespace(token=token, counted=False, clear=False))

    def claim(site):
        site.portal_catalog._claim(manager, uid)

    return claim


def test_claims_of_different_uids_at_once_merge(plone_sites):
    _concurrently(CONNECTED, _claiming("/plone/claims/one", 11), _claiming("/plone/claims/two", 12))
    with on_site(CONNECTED, commit=False) as site:
        values = set(site.portal_catalog._catalog_claims.values())
        assert {11, 12} <= values  # both committed


def test_claims_of_one_uid_at_once_conflict(plone_sites):
    with pytest.raises(AssertionError) as failed:
        _concurrently(CONNECTED, _claiming("/plone/claims/same", 21), _claiming("/plone/claims/same", 22))
    # (_concurrently asserts that neither transaction failed; B's ConflictError fails it.)
    assert f"[{ConflictError.__name__}()]" in str(failed.value), failed.value


def test_claims_are_kept_in_a_btree_of_bounded_slots(plone_sites):
    from plone_connector.catalog.tool import CLAIM_SLOTS

    with on_site(CONNECTED, commit=False) as site:
        claims = site.portal_catalog._catalog_claims
        assert claims is not None and len(claims) > 0  # the site's content claimed its entries
        assert all(0 <= slot < CLAIM_SLOTS for slot in claims)
