#!/usr/bin/env bash
# Run runqueue locally: set-up, migrate, an admin login, demo runs, a worker,
# and gunicorn serving the admin. Without DATABASE_URL it uses the embedded
# PostgreSQL in .pgdata/. HOST and PORT choose the address (default
# 127.0.0.1:8000); RUNQUEUE_DEMO=0 skips the demo runs. The first start
# writes .env: a generated SECRET_KEY and HTTPS_ONLY=off (see bootstrap.sh).
source "$(dirname "$0")/bootstrap.sh"

HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-8000}"

python manage.py migrate --noinput
python manage.py collectstatic --noinput --verbosity 0
python scripts/ensure_admin.py
if [ "${RUNQUEUE_DEMO:-1}" != "0" ]; then
    python manage.py runqueue_demo --runs 40 --spread-seconds 180
fi

# In a process group of its own: Ctrl-C in the terminal signals the foreground
# group, and the worker must get one SIGTERM (the trap's), not a second signal
# that would make it exit at once and leave its leases to expire.
python -c 'import os, sys; os.setpgrp(); os.execvp(sys.argv[1], sys.argv[1:])' \
    python manage.py runworker &
worker=$!
trap 'kill -TERM "$worker" 2>/dev/null; wait "$worker" 2>/dev/null' EXIT

echo "==> runqueue admin at http://$HOST:$PORT/admin/  (Ctrl-C stops the web server and the worker)"
gunicorn -c config/gunicorn_conf.py config.wsgi --bind "$HOST:$PORT" --access-logfile - --log-level info
