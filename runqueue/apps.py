from django.apps import AppConfig


class RunqueueConfig(AppConfig):
    name = "runqueue"
    verbose_name = "Run queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        import runqueue
        from runqueue import checks, conf  # noqa: F401 - registers checks and receivers
        from runqueue.submit import submit

        # The submodule import bound runqueue.submit to the module: the public
        # name is the function.
        runqueue.submit = submit
        # Every process (web, worker, shell) knows every kind, so submit can
        # refuse an unknown one.
        from runqueue import registry

        registry.autodiscover()
