"""The admin console for support staff.

Run changelists (all, dead-lettered, uncertain), the run detail page, audited
actions that call the service layer, the queue dashboard, concurrency limits,
budgets, API tokens and webhooks. Importing this package registers the ModelAdmins
with the default admin site.
"""

from runqueue.admin import (  # noqa: F401 - registers the ModelAdmins
    budgets,
    concurrency,
    paused,
    runs,
    schedules,
    tokens,
    webhooks,
    workers,
)
