"""The raw SQL of runqueue, loaded once from queries.sql by name."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

_BLOCK = re.compile(r"^-- name: (?P<name>[a-z_]+) --$", re.MULTILINE)


def parse(text: str) -> dict[str, str]:
    """Split a queries file into {name: statement}; names must be unique."""
    parts = _BLOCK.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        statement = "\n".join(
            line for line in body.strip().splitlines() if not line.lstrip().startswith("--")
        ).strip()
        queries[name] = statement.rstrip(";")
    return queries


@cache
def queries() -> dict[str, str]:
    return parse((Path(__file__).parent / "queries.sql").read_text())


def execute(cursor: Any, name: str, params: dict[str, Any]) -> Any:
    """Run the named statement on a Django or psycopg cursor."""
    cursor.execute(queries()[name], params)
    return cursor
