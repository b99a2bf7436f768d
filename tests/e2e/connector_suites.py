"""Anchor of the connector's own Plone tests re-run on JsonbStorage (see conftest.py).

Every ``tests/connector/test_*.py`` module except the differential scenario (which has
``test_differential_on_jsonb.py``) is collected again here, unchanged, with this folder's
fixtures: ``plone_sites`` is then the two-site layer on JsonbStorage. New connector test modules
are picked up without any change here.
"""

from pathlib import Path

CONNECTOR_TESTS = Path(__file__).parent.parent / "connector"
# Run by a module of their own here.
SEPARATE = {"test_differential_plone"}


def module_names() -> list[str]:
    return [path.stem for path in sorted(CONNECTOR_TESTS.glob("test_*.py")) if path.stem not in SEPARATE]
