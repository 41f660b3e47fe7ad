"""The worker process behind ``manage.py runworker``: a pool of slot threads,
a LISTEN connection that wakes them, a heartbeat and a sweeper."""
