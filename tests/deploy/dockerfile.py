"""Read a Dockerfile into instructions, and the build context's .dockerignore, as Docker does."""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON array of an exec-form CMD/ENTRYPOINT/HEALTHCHECK CMD, else None."""
        text = self.args
        if self.keyword == "HEALTHCHECK":
            text = re.sub(r"^(--\S+\s+)*CMD\s+", "", text)
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def parse(path: Path) -> list[Instruction]:
    instructions: list[Instruction] = []
    pending, start = "", 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comments inside a continued instruction are dropped by Docker too
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = pending + stripped
        pending = ""
        keyword, _, args = text.partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
    return instructions


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    result: list[list[Instruction]] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def copy_sources(instruction: Instruction) -> list[str]:
    """Build-context sources of a COPY/ADD (none for COPY --from=stage)."""
    words = instruction.args.split()
    if any(word.startswith("--from=") for word in words):
        return []
    words = [word for word in words if not word.startswith("--")]
    return words[:-1]


def dockerignore_patterns(context: Path) -> list[str]:
    path = context / ".dockerignore"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def is_ignored(relative: str, patterns: list[str]) -> bool:
    """Whether the context path is left out of the build context (last matching pattern wins)."""
    parts = Path(relative).parts
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        regex = _glob(pattern)
        if any(regex.fullmatch(candidate) for candidate in candidates):
            ignored = not negate
    return ignored


def _glob(pattern: str) -> re.Pattern[str]:
    # Docker's patterns: Go's filepath.Match plus `**` for any number of directories.
    pieces = []
    for piece in re.split(r"(\*\*/?)", pattern):
        if piece.startswith("**"):
            pieces.append("(?:.*/)?" if piece.endswith("/") else ".*")
        else:
            pieces.append(fnmatch.translate(piece).removeprefix("(?s:").removesuffix(")\\Z").replace(".*", "[^/]*"))
    return re.compile("".join(pieces))
