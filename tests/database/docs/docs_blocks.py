"""The fenced code blocks of README.md and docs/**/*.md, as the tests that run
them read them: each with its file, line, fence language and, when a
``<!-- name -->`` comment stands right above it, its name."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>.*)$")
MARKER = re.compile(r"^<!-- (?P<name>[a-z0-9-]+) -->$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, from 1
    info: str  # the fence's info string: "python", "python no-run", "sh", ...
    code: str
    name: str | None

    @property
    def language(self) -> str:
        return self.info.split()[0] if self.info else ""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in order (indented ones too: a block in
    a list item keeps its indent, which is taken off its lines)."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent = opening["indent"]
        end = i + 1
        while end < len(lines) and lines[end] != f"{indent}```":
            end += 1
        assert end < len(lines), f"{path.name}:{i + 1}: a fence that never closes"
        above = MARKER.match(lines[i - 1]) if i else None
        code = "\n".join(line.removeprefix(indent) for line in lines[i + 1 : end]) + "\n"
        found.append(Block(path, i + 1, opening["info"].strip(), code, above and above["name"]))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for path in doc_files() for block in blocks(path)]


def named(name: str) -> Block:
    """The block marked ``<!-- name -->`` (and closed by ``<!-- /name -->``),
    wherever in the docs it is."""
    (found,) = [b for b in all_blocks() if b.name == name]
    text = found.path.read_text().splitlines()
    closing = found.line + found.code.count("\n") + 1  # the line after the closing fence
    assert text[closing].strip() == f"<!-- /{name} -->", f"{found.where}: <!-- /{name} -->"
    return found
