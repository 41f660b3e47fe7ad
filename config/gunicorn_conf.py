"""gunicorn settings of the deployable project: ``gunicorn -c config/gunicorn_conf.py
config.wsgi``. Read from the environment like the Django settings.

Event streams (``GET /api/runs/<id>/stream/``) are long requests: each holds
a thread of its process for as long as it is open. Workers are threaded
(gthread); a process serves at most ``RUNQUEUE_STREAMS_PER_PROCESS`` streams
(the settings read the same variable; more get 503) and has
``GUNICORN_REQUEST_THREADS`` threads more, so streams can never take the
threads the admin and the API need.
"""

import os

workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "gthread"
threads = int(os.environ.get("RUNQUEUE_STREAMS_PER_PROCESS", "4")) + int(
    os.environ.get("GUNICORN_REQUEST_THREADS", "4")
)
# A stream outlives any request timeout by design; gthread's timeout is the
# worker's heartbeat, which streams do not block. On shutdown, open streams
# are cut after the grace period and their clients resume with Last-Event-ID.
graceful_timeout = 10
# A bulk admin action on 10,000 runs takes about 30 s in its request.
timeout = 120

if os.environ.get("RUNQUEUE_LOG_FORMAT", "plain") == "json":
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "runqueue.observability.logfmt.JsonFormatter"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
        "loggers": {
            "gunicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False},
            "gunicorn.access": {"handlers": ["console"], "level": "INFO", "propagate": False},
        },
    }
