"""The README's shell examples run on a plain machine: every command they
substitute (``$(...)``) uses a program every machine with the project has
(Python 3, the shell's own built-ins), and runs. Issue 37: the curl example
relied on ``uuidgen``, which a fresh machine does not have."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Programs a README example may substitute: the project needs Python 3;
#: the rest are POSIX shell built-ins.
PORTABLE = {"python3", "printf", "echo"}


def substitutions() -> list[str]:
    """Each ``$(...)`` in the README's shell blocks, parentheses balanced."""
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```(?:sh|bash|shell)\n(.*?)```", text, flags=re.DOTALL)
    found = []
    for block in blocks:
        start = block.find("$(")
        while start >= 0:
            depth, end = 0, start + 1
            for end in range(start + 1, len(block)):
                depth += {"(": 1, ")": -1}.get(block[end], 0)
                if depth == 0:
                    break
            found.append(block[start + 2 : end])
            start = block.find("$(", end)
    return found


def test_every_substituted_command_is_portable_and_runs() -> None:
    found = substitutions()
    assert any("uuid4" in c for c in found), found  # the curl example's key
    for command in found:
        program = shlex.split(command)[0]
        assert program in PORTABLE, f"{command!r}: {program} is not on every machine"
        done = subprocess.run(  # noqa: S603 - the README's own examples
            ["/bin/sh", "-c", command], capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, (command, done.stderr)
        assert done.stdout.strip(), command
