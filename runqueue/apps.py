from django.apps import AppConfig


class RunqueueConfig(AppConfig):
    name = "runqueue"
    verbose_name = "Run queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from runqueue import checks, conf, registry  # noqa: F401 - registers checks and receivers

        # Every process (web, worker, shell) knows every kind, so submit can
        # refuse an unknown one.
        registry.autodiscover()
