"""Replay every fixed case in tests/service/regressions/ against ZCatalog and the service.

Each JSON file is one minimal case (objects with their Python values, one query, a note saying
what went wrong) from a disagreement the differential tests found. Files are written by the
tests when ``DIFFERENTIAL_FAILURES`` is set (see docs/testing.md).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.service.oracle import ServiceCatalog, service_client_fixture  # noqa: F401
from tests.service.strategies import INDEXES, METADATA, case_from_json
from tests.service.test_differential import check_case

CASES = sorted((Path(__file__).parent / "regressions").glob("*.json"))


def test_there_are_fixed_cases():
    assert CASES, "tests/service/regressions/ holds no cases"


@pytest.fixture(scope="module")
def regression_catalog(service_client):
    catalog = ServiceCatalog(service_client, f"regr-{uuid.uuid4().hex[:12]}", INDEXES, METADATA)
    yield catalog
    catalog.drop()


@pytest.mark.parametrize("path", CASES, ids=[path.stem for path in CASES])
def test_fixed_case(regression_catalog, path):
    objects, query = case_from_json(json.loads(path.read_text()))
    check_case(regression_catalog, objects, [query])
