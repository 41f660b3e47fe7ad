#!/usr/bin/env bash
# Run the whole test suite: set-up included. Extra arguments go to pytest.
# Without DATABASE_URL the tests use the embedded PostgreSQL in .pgdata/.
source "$(dirname "$0")/bootstrap.sh"
exec python -m pytest "$@"
