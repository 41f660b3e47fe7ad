"""Read runqueue's SQL as it is sent and installed.

``python -m runqueue.sql list`` names every statement, function and
fragment, by the file that defines it; ``python -m runqueue.sql show NAME``
prints a statement as it is sent (fragments put in, comment lines left out)
or a function's ``CREATE OR REPLACE`` statement as migrations install it.
Neither needs a database or Django's settings.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from runqueue.sql import defined, functions, queries


def render_list() -> str:
    """Each file's name, then its blocks, one a line: kind and name."""
    lines = []
    for file, blocks in defined().items():
        lines.append(file)
        lines.extend(f"  {kind:<8} {name}" for kind, name in blocks)
    return "\n".join(lines) + "\n"


def render(name: str) -> str:
    """The statement or function ``name`` as loaded; KeyError if neither."""
    texts = {**queries(), **functions()}
    text = texts[name]
    return text if text.endswith("\n") else text + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runqueue.sql", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="every statement, function and fragment, by file")
    show = commands.add_parser("show", help="a statement or function, fragments put in")
    show.add_argument("name")
    args = parser.parse_args(argv)
    if args.command == "list":
        sys.stdout.write(render_list())
        return 0
    try:
        sys.stdout.write(render(args.name))
    except KeyError:
        fragments = {n for blocks in defined().values() for k, n in blocks if k == "fragment"}
        why = "a fragment: run alone by nobody" if args.name in fragments else "no such name"
        sys.stderr.write(f"{args.name}: {why} (python -m runqueue.sql list)\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
