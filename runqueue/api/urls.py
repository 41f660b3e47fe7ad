"""The API's URLs: ``path("api/", include("runqueue.api.urls"))``."""

from django.urls import path

from runqueue.api import schedules, views

app_name = "runqueue-api"

urlpatterns = [
    path("runs/", views.submit_run, name="runs"),
    path("runs/<str:run_id>/", views.get_run, name="run"),
    path("runs/<str:run_id>/events/", views.run_events, name="run-events"),
    path("runs/<str:run_id>/stream/", views.run_stream, name="run-stream"),
    path("runs/<str:run_id>/cancel/", views.cancel_run, name="run-cancel"),
    path("runs/<str:run_id>/pause/", views.pause_run, name="run-pause"),
    path("runs/<str:run_id>/resume/", views.resume_run, name="run-resume"),
    path("runs/<str:run_id>/signals/<str:name>/", views.signal_run, name="run-signal"),
    path("runs/<str:run_id>/input/", views.answer_run, name="run-input"),
    path("runs/<str:run_id>/steps/", views.run_steps, name="run-steps"),
    path(
        "runs/<str:run_id>/tools/<str:seq>/decision/",
        views.decide_tool,
        name="run-tool-decision",
    ),
    path("events/<str:name>/", views.receive_event, name="event"),
    path("sessions/<str:session_id>/", views.get_session, name="session"),
    path("sessions/<str:session_id>/stream/", views.session_stream, name="session-stream"),
    path("schedules/", schedules.schedules, name="schedules"),
    path("schedules/<str:schedule_id>/", schedules.schedule, name="schedule"),
    path("schedules/<str:schedule_id>/pause/", schedules.pause_schedule, name="schedule-pause"),
    path("schedules/<str:schedule_id>/resume/", schedules.resume_schedule, name="schedule-resume"),
    path("openapi.json", views.openapi_json, name="openapi"),
]
