"""runqueue's own handlers, found by ``registry.autodiscover``: importing
these modules registers housekeeping's kinds (``runqueue.history.housekeeping``), the
background bulk action's (``runqueue.history.bulk``), the webhook delivery's
(``runqueue.webhooks.sending``) and
the ``django.tasks`` kind (the tasks backend, which also registers Django's
``check_tasks``)."""

from runqueue import tasks_backend  # noqa: F401 - registers their kinds
from runqueue.webhooks import sending  # noqa: F401 - registers runqueue.webhook
