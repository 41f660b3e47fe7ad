from django.apps import AppConfig


class ChaosConfig(AppConfig):
    """The chaos runner: workers killed, frozen and cut off, a database
    restarted, and a verification that nothing was lost or done twice."""

    name = "tools.chaos"
    label = "chaos"
    verbose_name = "runqueue chaos runner"
