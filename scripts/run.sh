#!/usr/bin/env bash
# Run runqueue locally: set-up, migrate, an admin login, gunicorn serving the
# admin. Without DATABASE_URL it uses the embedded PostgreSQL in .pgdata/.
# HOST and PORT choose the address (default 127.0.0.1:8000).
source "$(dirname "$0")/bootstrap.sh"

HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-8000}"

python manage.py migrate --noinput
python manage.py collectstatic --noinput --verbosity 0
python scripts/ensure_admin.py

echo "==> runqueue admin at http://$HOST:$PORT/admin/  (Ctrl-C stops)"
exec gunicorn config.wsgi --bind "$HOST:$PORT" --workers 2 --access-logfile - --log-level info
