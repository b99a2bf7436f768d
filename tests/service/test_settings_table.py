"""Every setting is read by the service and listed in README.md's settings table: no dead flags,
none an operator cannot find."""

from __future__ import annotations

import re
from pathlib import Path

from catalog_service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "service" / "catalog_service"


def environment_name(name: str, field) -> str:
    return field.validation_alias if isinstance(field.validation_alias, str) else f"CATALOG_{name.upper()}"


def test_every_setting_is_in_the_readme_table():
    readme = ROOT.joinpath("README.md").read_text()
    table = "\n".join(line for line in readme.splitlines() if line.startswith("| `"))
    listed = set(re.findall(r"`([A-Z_]+)`", table))
    missing = [environment_name(name, field) for name, field in Settings.model_fields.items()
               if environment_name(name, field) not in listed]
    assert missing == []


def test_every_setting_is_read_outside_settings_py():
    code = "\n".join(path.read_text() for path in SERVICE.rglob("*.py") if path.name != "settings.py")
    unread = [name for name in Settings.model_fields if not re.search(rf"\.{name}\b", code)]
    assert unread == []
