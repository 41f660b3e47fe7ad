"""The API's URLs: ``path("api/", include("runqueue.api.urls"))``."""

from django.urls import path

from runqueue.api import inbound_events, openapi, run_events, runs, schedules, sessions, steps

app_name = "runqueue-api"

urlpatterns = [
    path("runs/", runs.submit_run, name="runs"),
    path("runs/<str:run_id>/", runs.get_run, name="run"),
    path("runs/<str:run_id>/events/", run_events.run_events, name="run-events"),
    path("runs/<str:run_id>/stream/", run_events.run_stream, name="run-stream"),
    path("runs/<str:run_id>/cancel/", runs.cancel_run, name="run-cancel"),
    path("runs/<str:run_id>/pause/", runs.pause_run, name="run-pause"),
    path("runs/<str:run_id>/resume/", runs.resume_run, name="run-resume"),
    path("runs/<str:run_id>/signals/<str:name>/", runs.signal_run, name="run-signal"),
    path("runs/<str:run_id>/input/", runs.answer_run, name="run-input"),
    path("runs/<str:run_id>/steps/", steps.run_steps, name="run-steps"),
    path(
        "runs/<str:run_id>/tools/<str:seq>/decision/",
        steps.decide_tool,
        name="run-tool-decision",
    ),
    path("events/<str:name>/", inbound_events.receive_event, name="event"),
    path("sessions/<str:session_id>/", sessions.get_session, name="session"),
    path("sessions/<str:session_id>/stream/", sessions.session_stream, name="session-stream"),
    path("schedules/", schedules.schedules, name="schedules"),
    path("schedules/<str:schedule_id>/", schedules.schedule, name="schedule"),
    path("schedules/<str:schedule_id>/pause/", schedules.pause_schedule, name="schedule-pause"),
    path("schedules/<str:schedule_id>/resume/", schedules.resume_schedule, name="schedule-resume"),
    path("openapi.json", openapi.openapi_json, name="openapi"),
]
