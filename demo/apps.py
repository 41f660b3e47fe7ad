from django.apps import AppConfig


class DemoConfig(AppConfig):
    """Demo handlers and ``manage.py runqueue_demo``: a live system to look at."""

    name = "demo"
    verbose_name = "runqueue demo"
