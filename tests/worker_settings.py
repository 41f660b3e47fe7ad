"""Settings for runworker subprocesses started by the tests: the project's
settings, pointed at the test database the parent test run created."""

import json
import os
from urllib.parse import quote

# The test database is chosen already: without DATABASE_URL, config.settings
# would start (or, on a machine where none ran yet, create: as root that
# needs useradd, which the tests' PATH may not reach) the embedded server,
# only for DATABASES to be replaced below, as this URL's is.
_test = json.loads(os.environ["RUNQUEUE_TEST_DATABASE"])
os.environ.setdefault(
    "DATABASE_URL",
    f"postgres://{quote(_test['USER'], safe='')}:{quote(_test['PASSWORD'] or '', safe='')}"
    f"@{quote(_test['HOST'], safe='')}:{_test['PORT']}/{quote(_test['NAME'], safe='')}",
)

from config.settings import *  # noqa: E402, F403

DATABASES = {
    "default": _test,
    "direct": json.loads(
        os.environ.get("RUNQUEUE_TEST_DIRECT_DATABASE") or os.environ["RUNQUEUE_TEST_DATABASE"]
    ),
}
# The handler modules: tests.handlers, or the test's own (a worker of an
# older or newer deploy, tests/workers/test_versions_workers.py).
RUNQUEUE = json.loads(os.environ.get("RUNQUEUE_TEST_SETTINGS", "{}")) | {
    "HANDLER_MODULES": json.loads(
        os.environ.get("RUNQUEUE_TEST_HANDLER_MODULES", '["tests.handlers"]')
    )
}
