"""The connector's differential scenario (tests/connector/test_differential_plone.py) on JsonbStorage.

The scenario function is imported, not copied: pytest collects it here, where the ``plone_sites``
fixture (tests/e2e/conftest.py) is the two-site layer whose ZODB is a JsonbStorage. The stock
ZCatalog site and the connector site get the same actions and must give the same answers.
"""

import pytest
from plone import api

from plone_connector.storage import JsonbStorage
from tests.connector.sites import CONNECTED, SITES, delete_from, on_site
from tests.connector.test_differential_plone import (  # noqa: F401  (collected here)
    ROOT,
    test_same_answers_through_a_site_life,
)

pytestmark = [pytest.mark.slow, pytest.mark.plone]


@pytest.fixture
def removed_afterwards(plone_sites):
    """Here the scenario's tree stays for the test below, which checks where it lives and then
    removes it (the connector module's fixture of this name removes it at once)."""
    yield


def test_the_scenario_ran_on_jsonb_storage(plone_sites):
    # After the scenario above: both sites, and what it created, live in the JSONB storage.
    try:
        for name in SITES:
            with on_site(name, commit=False) as site:
                storage = site._p_jar.db().storage
                assert isinstance(storage, JsonbStorage)
                assert site[ROOT]["folder-a"]["sub-copy"]["deep"].title == "Deep page copy"
        with on_site(CONNECTED, commit=False) as site:
            assert site.portal_catalog.catalog_id() == plone_sites.catalog_id
            assert api.content.find(context=site[ROOT], portal_type="Folder", sort_on="path")
    finally:
        for name in SITES:
            delete_from(name, ROOT)
