"""Settings for runworker subprocesses started by the tests: the project's
settings, pointed at the test database the parent test run created."""

import json
import os

from config.settings import *  # noqa: F403

DATABASES = {
    "default": json.loads(os.environ["RUNQUEUE_TEST_DATABASE"]),
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
