"""Read docker-compose.yml as Docker Compose does: YAML (with merge keys), then variable interpolation.

Interpolation follows the Compose Specification ("Interpolation"): ``$$`` is a literal ``$``;
``$VAR`` and ``${VAR}``; ``${VAR:-default}`` (unset or empty) and ``${VAR-default}`` (unset);
``${VAR:?error}`` / ``${VAR?error}``; ``${VAR:+alt}`` / ``${VAR+alt}``; defaults may nest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class InterpolationError(ValueError):
    """A ${VAR:?message} whose variable is missing, or a malformed expression."""


def _braced_end(text: str, start: int) -> int:
    """Index of the ``}`` closing the ``${`` whose body starts at ``start`` (nesting counted)."""
    depth = 1
    i = start
    while i < len(text):
        if text.startswith("$$", i):
            i += 2
            continue
        if text.startswith("${", i):
            depth += 1
            i += 2
            continue
        if text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise InterpolationError(f"unclosed ${{ in {text!r}")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        if not text.startswith("$", i):
            out.append(text[i])
            i += 1
            continue
        if text.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        if text.startswith("${", i):
            end = _braced_end(text, i + 2)
            out.append(_expand(text[i + 2 : end], env))
            i = end + 1
            continue
        name = _NAME.match(text, i + 1)
        if name is None:
            out.append("$")
            i += 1
            continue
        out.append(env.get(name.group(), ""))
        i = name.end()
    return "".join(out)


def _expand(body: str, env: Mapping[str, str]) -> str:
    name = _NAME.match(body)
    if name is None:
        raise InterpolationError(f"bad variable name in ${{{body}}}")
    var, rest = name.group(), body[name.end() :]
    value = env.get(var)
    if rest == "":
        return value or ""
    for op in (":-", "-", ":?", "?", ":+", "+"):
        if rest.startswith(op):
            arg = rest[len(op) :]
            missing = value is None or (op.startswith(":") and value == "")
            if op in (":-", "-"):
                return interpolate(arg, env) if missing else value
            if op in (":?", "?"):
                if missing:
                    raise InterpolationError(f"{var}: {interpolate(arg, env) or 'required'}")
                return value
            return "" if missing else interpolate(arg, env)
    raise InterpolationError(f"bad modifier in ${{{body}}}")


def _walk(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [_walk(item, env) for item in node]
    if isinstance(node, dict):
        return {key: _walk(value, env) for key, value in node.items()}
    return node


def read_env_file(path: Path, env: Mapping[str, str]) -> dict[str, str]:
    """A Compose ``--env-file``: KEY=VALUE lines; values may refer to variables defined earlier."""
    values = dict(env)
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise InterpolationError(f"{path.name}: not KEY=VALUE: {line!r}")
        values[key.strip()] = interpolate(value.strip(), values)
    return values


def raw_compose(path: Path = COMPOSE_FILE) -> dict:
    return yaml.safe_load(path.read_text())


def load_compose(env: Mapping[str, str] | None = None, path: Path = COMPOSE_FILE) -> dict:
    """The compose model after interpolation with ``env`` (default: no variables set)."""
    return _walk(raw_compose(path), env or {})


def env_of(service: dict) -> dict[str, str]:
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        return dict(item.partition("=")[::2] for item in environment)
    return {key: "" if value is None else str(value) for key, value in environment.items()}
