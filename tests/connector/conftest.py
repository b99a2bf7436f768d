import os

import pytest

from plone_connector.catalog.cache import query_cache
from plone_connector.catalog.client import reset_client
from tests.connector.service import ServiceProcess


@pytest.fixture(scope="session")
def catalog_service(database_url):
    service = ServiceProcess(database_url)
    service.start()
    saved = {k: os.environ.get(k) for k in ("CATALOG_SERVICE_URL", "CATALOG_SERVICE_TOKEN", "CATALOG_SERVICE_RETRIES")}
    os.environ["CATALOG_SERVICE_URL"] = service.url
    os.environ["CATALOG_SERVICE_TOKEN"] = service.admin_token
    # Fault tests stop the service; a short retry keeps them fast.
    os.environ["CATALOG_SERVICE_RETRIES"] = "2"
    reset_client()
    yield service
    service.stop()
    reset_client()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="package")
def plone_sites(catalog_service):
    from tests.connector.sites import CONNECTOR_LAYER, set_up, tear_down

    layers = set_up(CONNECTOR_LAYER)
    query_cache.clear()
    yield CONNECTOR_LAYER
    tear_down(layers)
