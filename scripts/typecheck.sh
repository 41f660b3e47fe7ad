#!/usr/bin/env bash
# Type-check runqueue/ with mypy and django-stubs (pinned in
# requirements/typecheck.txt), as CI does. Extra arguments go to mypy.
#
# The stubs' plugin imports config.settings. A DATABASE_URL that is never
# connected to keeps the settings from starting the embedded PostgreSQL, and
# a throwaway SECRET_KEY lets them load without .env: nothing runs, nothing
# is served, so neither is ever used.
source "$(dirname "$0")/bootstrap.sh"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements/typecheck.txt
export DATABASE_URL="postgres://typecheck@127.0.0.1:1/not_connected"
export SECRET_KEY="${SECRET_KEY:-typecheck-only-never-served}"
exec .venv/bin/mypy "${@:-runqueue}"
