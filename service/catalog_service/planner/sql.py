"""Bound parameters for generated SQL.

Statement text must depend only on a query's shape, never on its values (asyncpg caches prepared
statements by text), so every value goes through ``Params.add`` and comes back as ``$n::type``.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import QueryError

# What PostgreSQL's integer types hold: a query value beyond them is the caller's error (400),
# not a DataError from the driver.
_RANGES = {"integer": (-(2**31), 2**31 - 1), "bigint": (-(2**63), 2**63 - 1),
           "smallint": (-(2**15), 2**15 - 1)}


def _check(value: Any, cast: str) -> None:
    base = cast[:-2] if cast.endswith("[]") else cast
    items = value if cast.endswith("[]") and isinstance(value, list | tuple) else (value,)
    if base in _RANGES:
        lo, hi = _RANGES[base]
        for item in items:
            if isinstance(item, int) and not lo <= item <= hi:
                raise QueryError(f"{item} is out of range for a query value ({base})")
    elif base in ("text", "jsonb"):
        for item in items:
            # PostgreSQL text cannot hold NUL (jsonb: no \u0000 escape either).
            if isinstance(item, str) and ("\x00" in item or (base == "jsonb" and "\\u0000" in item)):
                raise QueryError("query values cannot contain NUL characters")


class Params:
    def __init__(self) -> None:
        self.values: list[Any] = []

    def add(self, value: Any, cast: str) -> str:
        _check(value, cast)
        self.values.append(value)
        return f"${len(self.values)}::{cast}"


# Every name catalog_schemas.api.NAME_PATTERN admits ("_" alone too), nothing that needs quoting.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_]+")


def quote_literal_name(name: str) -> str:
    """A JSON key as an SQL string literal. Names come from the index registry, which only accepts
    identifiers matching ``NAME_PATTERN``; the check here keeps that promise local."""
    if not _SAFE_NAME.fullmatch(name):
        raise ValueError(f"not a safe index name: {name!r}")
    return "'" + name + "'"


def ident(name: str) -> str:
    if not _SAFE_NAME.fullmatch(name):
        raise ValueError(f"not a safe identifier: {name!r}")
    return '"' + name + '"'


def any_of(conditions: list[str]) -> str:
    if not conditions:
        return "false"
    if len(conditions) == 1:
        return conditions[0]
    return "(" + " or ".join(conditions) + ")"


def all_of(conditions: list[str]) -> str:
    if not conditions:
        return "true"
    if len(conditions) == 1:
        return conditions[0]
    return "(" + " and ".join(conditions) + ")"
