# Sourced by scripts/run.sh and scripts/test.sh: find Python >= 3.12, make
# .venv, install the pinned requirements. Safe to run again: it only installs
# when requirements changed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

python_ok() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; }

find_python() {
    if [ -n "${PYTHON:-}" ]; then
        python_ok "$PYTHON" && { echo "$PYTHON"; return; }
        echo "PYTHON=$PYTHON is not Python 3.12 or newer" >&2; return 1
    fi
    local c
    for c in python3.14 python3.13 python3.12 python3 python; do
        if command -v "$c" >/dev/null 2>&1 && python_ok "$c"; then echo "$c"; return; fi
    done
    # pyenv installs versions without putting them on PATH.
    if command -v pyenv >/dev/null 2>&1; then
        local root v
        root="$(pyenv root)"
        for v in $(pyenv versions --bare 2>/dev/null | sort -rV); do
            c="$root/versions/$v/bin/python"
            if [ -x "$c" ] && python_ok "$c"; then echo "$c"; return; fi
        done
    fi
    echo "runqueue needs Python 3.12 or newer (Django 6); none was found. Set PYTHON=/path/to/python3.12." >&2
    return 1
}

if [ ! -x .venv/bin/python ] || ! python_ok .venv/bin/python; then
    PY="$(find_python)"
    echo "==> creating .venv with $("$PY" --version)"
    rm -rf .venv
    "$PY" -m venv .venv
fi

stamp=.venv/.requirements.sha
want="$(cat requirements/*.txt pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "==> installing requirements into .venv"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements/dev.txt -e .
    echo "$want" > "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"

# The project refuses to start without SECRET_KEY (DEBUG is off): keep a
# generated local one in .env, with HTTPS_ONLY=off for plain HTTP on
# 127.0.0.1. Written once; RUNQUEUE_ENV_FILE="" opts out.
if [ "${RUNQUEUE_ENV_FILE-.env}" != "" ]; then
    .venv/bin/python scripts/local_env.py "${RUNQUEUE_ENV_FILE:-.env}"
fi
