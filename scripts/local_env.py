"""Write this checkout's local ``.env`` the first time: a generated SECRET_KEY
and HTTPS_ONLY=off (run.sh serves plain HTTP on 127.0.0.1).

The deployable project refuses to start without SECRET_KEY when DEBUG is off,
so the two commands (run.sh, test.sh) keep one here, generated once and never
committed (.env is in .gitignore). Lines already in .env are left alone;
only missing ones are added.
"""

import secrets
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HEADER = (
    "# This checkout's local settings, written by scripts/run.sh (never commit them).\n"
    "# A deployment sets its own SECRET_KEY and serves HTTPS: docs/operations.md, Deployment.\n"
)


def missing_lines(text: str) -> list[str]:
    """The lines .env still needs, given what it holds now."""
    names = {line.split("=", 1)[0].strip() for line in text.splitlines() if "=" in line}
    lines = []
    if "SECRET_KEY" not in names:
        lines.append(f"SECRET_KEY={secrets.token_urlsafe(50)}")
    if "HTTPS_ONLY" not in names:
        lines.append("HTTPS_ONLY=off")
    return lines


def main(path: Path) -> None:
    text = path.read_text() if path.exists() else ""
    lines = missing_lines(text)
    if not lines:
        return
    prefix = HEADER if not text else ("" if text.endswith("\n") else "\n")
    with path.open("a") as f:
        f.write(prefix + "\n".join(lines) + "\n")
    path.chmod(0o600)
    print(f"==> wrote {', '.join(line.split('=')[0] for line in lines)} to {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / ".env")
