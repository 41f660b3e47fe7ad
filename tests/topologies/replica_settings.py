"""Settings of the replica reads scenario (tests/topologies/replica_reads.py):
the worker subprocesses' settings on a pair's primary, its standby as the
``replica`` alias, and runqueue's router."""

import json
import os

from tests.worker_settings import *  # noqa: F403
from tests.worker_settings import DATABASES

DATABASES["replica"] = json.loads(os.environ["RUNQUEUE_TEST_REPLICA_DATABASE"])
DATABASE_ROUTERS = ["runqueue.reads.routing.ReadReplicaRouter"]
