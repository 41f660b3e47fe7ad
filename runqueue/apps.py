from django.apps import AppConfig


class RunqueueConfig(AppConfig):
    name = "runqueue"
    verbose_name = "Run queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers checks, receivers and the hooks the lower layers call.
        from runqueue import checks, conf, registry  # noqa: F401
        from runqueue.observability import observe  # noqa: F401
        from runqueue.schedules import spec  # noqa: F401

        # Every process (web, worker, shell) knows every kind, so submit can
        # refuse an unknown one.
        registry.autodiscover()
