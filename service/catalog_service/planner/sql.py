"""Bound parameters for generated SQL.

Statement text must depend only on a query's shape, never on its values (asyncpg caches prepared
statements by text), so every value goes through ``Params.add`` and comes back as ``$n::type``.
"""

from __future__ import annotations

from typing import Any


class Params:
    def __init__(self) -> None:
        self.values: list[Any] = []

    def add(self, value: Any, cast: str) -> str:
        self.values.append(value)
        return f"${len(self.values)}::{cast}"


def quote_literal_name(name: str) -> str:
    """A JSON key as an SQL string literal. Names come from the index registry, which only accepts
    identifiers matching ``NAME_PATTERN``; the check here keeps that promise local."""
    if not name.replace("_", "").isalnum() or not name.isascii():
        raise ValueError(f"not a safe index name: {name!r}")
    return "'" + name + "'"


def ident(name: str) -> str:
    if not name.replace("_", "").isalnum() or not name.isascii():
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
