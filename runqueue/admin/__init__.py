"""The admin console for support staff.

Run changelists (all, dead-lettered, uncertain), the run detail page, audited
actions that call the service layer, the queue dashboard, concurrency limits,
budgets, API tokens, webhooks, and inbound events with their triggers. Importing
this package registers the ModelAdmins with the default admin site.
"""

from runqueue.admin import (  # noqa: F401 - registers the ModelAdmins
    budgets,
    concurrency,
    events,
    paused,
    runs,
    schedules,
    tokens,
    webhooks,
    workers,
)
