from runqueue.api import admin as _api_admin  # noqa: F401, E402 - registers the ApiToken admin
