"""The API's URLs: ``path("api/", include("runqueue.api.urls"))``."""

from django.urls import include, path

from runqueue.api import inbound_events, openapi, run_events, runs, schedules, sessions, steps

app_name = "runqueue-api"

#: Below ``runs/<run_id>/``: the run and what is done to it.
_run = [
    path("", runs.get_run, name="run"),
    path("events/", run_events.run_events, name="run-events"),
    path("stream/", run_events.run_stream, name="run-stream"),
    path("cancel/", runs.cancel_run, name="run-cancel"),
    path("pause/", runs.pause_run, name="run-pause"),
    path("resume/", runs.resume_run, name="run-resume"),
    path("signals/<str:name>/", runs.signal_run, name="run-signal"),
    path("input/", runs.answer_run, name="run-input"),
    path("steps/", steps.run_steps, name="run-steps"),
    path("tools/<str:seq>/decision/", steps.decide_tool, name="run-tool-decision"),
]

#: Below ``schedules/<schedule_id>/``.
_schedule = [
    path("", schedules.schedule, name="schedule"),
    path("pause/", schedules.pause_schedule, name="schedule-pause"),
    path("resume/", schedules.resume_schedule, name="schedule-resume"),
]

urlpatterns = [
    path("runs/", runs.submit_run, name="runs"),
    path("runs/<str:run_id>/", include(_run)),
    path("events/<str:name>/", inbound_events.receive_event, name="event"),
    path("sessions/<str:session_id>/", sessions.get_session, name="session"),
    path("sessions/<str:session_id>/stream/", sessions.session_stream, name="session-stream"),
    path("schedules/", schedules.schedules, name="schedules"),
    path("schedules/<str:schedule_id>/", include(_schedule)),
    path("openapi.json", openapi.openapi_json, name="openapi"),
]
