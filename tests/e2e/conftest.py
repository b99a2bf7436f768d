"""Fixtures of the end-to-end tests: the catalog service and the two-site layer on JsonbStorage.

The service fixture is the connector tests' own (imported, so it is the same code). Storage and
service share the session database, so the storage's ``catalog_txn_outcome`` rows are the ones the
service's resolver reads.
"""

import importlib
import os
from pathlib import Path

import pytest

from plone_connector.catalog.cache import query_cache
from plone_connector.catalog.client import reset_client
from tests.connector.conftest import catalog_service  # noqa: F401  (a fixture, used by name)
from tests.e2e import connector_suites
from tests.e2e.jsonb_layer import JSONB_LAYER, layer_set_up

ANCHOR = Path(connector_suites.__file__)


@pytest.fixture(scope="package")
def plone_sites(catalog_service, database_url):  # noqa: F811
    """The layer (sites ``plone`` and ``conn``) on JsonbStorage; named as tests/connector names it,
    so the connector's scenario functions run on it unchanged."""
    JSONB_LAYER.dsn = database_url
    with layer_set_up(JSONB_LAYER):
        query_cache.clear()
        yield JSONB_LAYER


class ConnectorModule(pytest.Module):
    """A tests/connector module collected under this folder, so this folder's fixtures apply."""

    def _getobj(self):
        return importlib.import_module(f"tests.connector.{self.name}")


class ConnectorSuites(pytest.File):
    def collect(self):
        for name in connector_suites.module_names():
            yield ConnectorModule.from_parent(self, path=self.path, name=name, nodeid=f"{self.nodeid}::{name}")


def pytest_collect_file(file_path, parent):
    if file_path == ANCHOR:
        return ConnectorSuites.from_parent(parent, path=file_path)
    return None


def pytest_collection_modifyitems(items):
    # The connector's modules last among this folder's tests (the items of other folders keep
    # their places): some leave content at the top of the site ``conn``, which the differential
    # scenario compares between the two sites.
    ours = [i for i, item in enumerate(items) if item.path.parent == ANCHOR.parent]
    block = sorted((items[i] for i in ours), key=lambda item: item.path == ANCHOR)
    for i, item in zip(ours, block, strict=True):
        items[i] = item


@pytest.fixture(autouse=True)
def talk_to_this_folders_service(catalog_service):  # noqa: F811
    """The connector reads the service's address from the environment, which the connector
    tests' own service fixture also sets when it starts; point it at this folder's service."""
    if os.environ.get("CATALOG_SERVICE_URL") != catalog_service.url:
        os.environ["CATALOG_SERVICE_URL"] = catalog_service.url
        os.environ["CATALOG_SERVICE_TOKEN"] = catalog_service.admin_token
        reset_client()
