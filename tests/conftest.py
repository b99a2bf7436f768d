import os

import pytest
from hypothesis import HealthCheck, settings

from tests.pg import create_database, drop_database

settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "nightly", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def database_url():
    """A fresh database on a real PostgreSQL, for the whole test session."""
    dsn, admin = create_database()
    yield dsn
    drop_database(admin, dsn)


@pytest.fixture(scope="session")
def live_service(database_url):
    """The catalog service over HTTP: a real uvicorn process on the session's database."""
    from tests.live import start_service

    # Relevance pages cut the score cells as low as the service allows, so that the small catalogs
    # of the tests exercise the cut and its check (docs/decisions/0007), not only "every cell".
    service = start_service(database_url, extra_env={"CATALOG_RELEVANCE_CANDIDATES": "1"})
    yield service
    service.stop()
